"""Deterministic sample data: realistic logs, multi-byte text, minified JSON and binary.

The demo, the benchmarks and the tests all need content that looks like what agents
offload, without depending on files outside the checkout.  Every generator here is
seeded, so the same arguments always give the same bytes on every machine.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

__all__ = ["log_lines", "log_text", "multibyte_text", "minified_json", "binary_blob", "write_log"]

_LEVELS = ("INFO", "INFO", "INFO", "INFO", "DEBUG", "DEBUG", "WARN", "ERROR")
_COMPONENTS = (
    "http.server", "db.pool", "auth.session", "scheduler", "cache.lru", "worker.queue",
    "storage.s3", "grpc.client", "metrics", "kernel",
)
_MESSAGES = (
    "GET {path} {status} {ms}ms bytes={size}",
    "POST {path} {status} {ms}ms user={user}",
    "connection {conn} acquired from pool (active={n}, idle={m})",
    "session {sid} refreshed for user={user} ttl={ttl}s",
    "job {job} scheduled at {ms}ms delay, queue depth={n}",
    "cache miss key={key} size={size} evicted={m}",
    "upload part {n}/{m} of {key} finished in {ms}ms",
    "rpc {path} to {host} returned {status} after {ms}ms",
    "gc pause {ms}ms heap={size}KB objects={n}",
    "retrying {path} attempt {n} of {m} after timeout",
)
_FAILURES = (
    "request {path} failed: upstream {host} timed out after {ms}ms",
    "Error: could not write {key}: disk quota exceeded (used={size}KB)",
    "worker {conn} crashed with exit code {status}; restarting (failure {n})",
    "authentication failure for user={user} from {host}",
)
_PATHS = ("/api/v1/items", "/api/v1/users/{n}", "/healthz", "/static/app.js", "/api/v2/search?q={key}")
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


def log_lines(seed: int = 0, start: int = 1_700_000_000) -> Iterator[str]:
    """Yield an endless, deterministic stream of varied log lines (without newlines)."""
    rnd = random.Random(seed)
    t = float(start)
    # Requests and sessions span many lines, as in real logs: ids come from pools
    # that renew slowly, not from a fresh random draw on every line.
    requests = [f"{rnd.getrandbits(32):08x}" for _ in range(32)]
    sessions = [f"{rnd.getrandbits(64):016x}" for _ in range(16)]
    conns = [f"c-{rnd.getrandbits(24):06x}" for _ in range(24)]
    while True:
        if rnd.random() < 0.05:
            requests[rnd.randrange(32)] = f"{rnd.getrandbits(32):08x}"
        if rnd.random() < 0.01:
            sessions[rnd.randrange(16)] = f"{rnd.getrandbits(64):016x}"
        t += rnd.expovariate(50.0)
        level = rnd.choice(_LEVELS)
        template = rnd.choice(_FAILURES) if level in ("ERROR", "WARN") and rnd.random() < 0.6 else rnd.choice(_MESSAGES)
        fields = {
            "path": rnd.choice(_PATHS).format(n=rnd.randrange(10_000), key=rnd.choice(_WORDS)),
            "status": rnd.choice((200, 200, 200, 201, 204, 301, 404, 500, 503)),
            "ms": rnd.randrange(1, 5000),
            "size": rnd.choice((512, 1024, 4096, 16384, 65536)) + rnd.randrange(100),
            "user": f"{rnd.choice(_WORDS)}{rnd.randrange(1000)}",
            "conn": rnd.choice(conns),
            "n": rnd.randrange(1, 64),
            "m": rnd.randrange(1, 64),
            "sid": rnd.choice(sessions),
            "ttl": rnd.choice((300, 900, 3600)),
            "job": f"job-{rnd.choice(requests)}",
            "key": f"{rnd.choice(_WORDS)}/{rnd.choice(requests)}",
            "host": f"10.0.{rnd.randrange(8)}.{rnd.randrange(32)}:{rnd.choice((80, 443, 8080, 9090))}",
        }
        secs = int(t)
        ms = int((t - secs) * 1000)
        stamp = _format_time(secs)
        yield (
            f"{stamp}.{ms:03d} {level:<5} [{rnd.choice(_COMPONENTS)}] "
            f"req={rnd.choice(requests)} {template.format(**fields)}"
        )


def _format_time(secs: int) -> str:
    days, rem = divmod(secs, 86400)
    hh, rem = divmod(rem, 3600)
    mm, ss = divmod(rem, 60)
    # Civil-from-days (Howard Hinnant), avoiding datetime on the hot path.
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y += m <= 2
    return f"{y:04d}-{m:02d}-{d:02d}T{hh:02d}:{mm:02d}:{ss:02d}"


def log_text(size: int, seed: int = 0) -> str:
    """Return about ``size`` bytes of log text (whole lines, each ending in ``\\n``)."""
    parts: list[str] = []
    total = 0
    for line in log_lines(seed):
        if total >= size:
            break
        parts.append(line)
        total += len(line) + 1
    return "\n".join(parts) + "\n" if parts else ""


def write_log(path: str, size: int, seed: int = 0, block: int = 4 << 20) -> int:
    """Write about ``size`` bytes of log text to ``path`` in blocks; return the bytes written."""
    written = 0
    lines = log_lines(seed)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        while written < size:
            buf: list[str] = []
            n = 0
            while n < block and written + n < size:
                line = next(lines) + "\n"
                buf.append(line)
                n += len(line)
            fh.write("".join(buf))
            written += n
    return written


_MB_WORDS = (
    "日志", "エラー", "오류", "ошибка", "σφάλμα", "خطأ", "त्रुटि", "naïve", "café", "Zürich",
    "emoji🙂", "🚀launch", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ok", "status", "данные", "数据库", "接続",
)


def multibyte_text(size: int, seed: int = 0) -> str:
    """Return about ``size`` bytes (UTF-8) of lines mixing 1-, 2-, 3- and 4-byte characters."""
    rnd = random.Random(seed)
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        n += 1
        words = " ".join(rnd.choice(_MB_WORDS) for _ in range(rnd.randrange(3, 18)))
        line = f"{n:07d} {words}\n"
        parts.append(line)
        total += len(line.encode("utf-8"))
    return "".join(parts)


def minified_json(size: int, seed: int = 0) -> str:
    """Return about ``size`` bytes of minified JSON on a single line (an API answer)."""
    rnd = random.Random(seed)
    items = []
    total = 0
    i = 0
    while total < size:
        item = {
            "id": i,
            "name": f"{rnd.choice(_WORDS)}-{rnd.getrandbits(32):08x}",
            "tags": [rnd.choice(_WORDS) for _ in range(rnd.randrange(1, 5))],
            "score": round(rnd.random() * 100, 3),
            "active": rnd.random() < 0.8,
            "note": rnd.choice(("", "needs review", "error: missing field", "ok", "日本語のメモ")),
        }
        s = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        items.append(s)
        total += len(s.encode("utf-8")) + 1
        i += 1
    return '{"count":' + str(i) + ',"items":[' + ",".join(items) + "]}"


def binary_blob(size: int, seed: int = 0) -> bytes:
    """Return ``size`` bytes of binary data: random blocks mixed with repetitive ones, like an archive."""
    rnd = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        if rnd.random() < 0.5:
            out += rnd.randbytes(4096)
        else:
            out += bytes([rnd.randrange(256)]) * rnd.randrange(16, 512) + rnd.randbytes(64)
    # Make sure it is not valid UTF-8 even when short.
    out[0:2] = b"\xff\xfe"
    return bytes(out[:size])
