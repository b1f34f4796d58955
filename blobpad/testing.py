"""The storage contract as a reusable test suite: every engine's tests subclass :class:`EngineTests`.

Like ``zarr.testing.store.StoreTests`` and dulwich's ``ObjectStoreTests``: a new engine
is correct when a subclass that says how to open it passes every test here::

    import pytest
    from blobpad.testing import EngineTests

    class TestMyEngine(EngineTests):
        @pytest.fixture
        def open_engine(self, tmp_path):
            engines = []
            def make():
                engine = my_engine.open(tmp_path / "db")
                engines.append(engine)
                return engine
            yield make
            for engine in engines:
                engine.close()

``open_engine()`` returns a fresh engine the first time; calling it again in the same
test returns another holder of the same store (so that two holders can be tested
together); the fixture closes them.  An engine is what
:func:`blobpad.engine.open_engine` returns for a target (``open_engine(tmp_path / "db")``,
``open_engine("memory://name")``, ``open_engine("redis://host:port/0?namespace=t")``), never
a store's ``store.engine``: that is the checked layer of an open store, which already
holds the store's settings.  The tests check the engine against an in-memory
model (a dict), through the checked layer the store uses (:class:`blobpad.engine.Checked`):
ordered scans and their bounds, read-your-writes, atomic commits, snapshot reads that
neither see later commits nor block them, serializable writers, one transaction per
thread, the integrity checks at the seam, capabilities, and close.

It needs pytest (the ``test`` extra).
"""

from __future__ import annotations

import faulthandler
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .engine import SPACES, Capabilities, Checked, Engine, ReadTxn, WriteTxn, prefix_end
from .engine.base import SEAL_SIZE, VALUE_LIMITS, seal
from .errors import BlobpadError, CorruptData, InvalidArgument

__all__ = ["EngineTests"]

_WAIT = 30.0  # the longest any test waits for another thread, in seconds


def _scan(txn: ReadTxn, space: str, start: bytes = b"", stop: bytes | None = None, reverse: bool = False
          ) -> list[tuple[bytes, bytes]]:
    return list(txn.scan(space, start, stop, reverse=reverse))


def _model_scan(model: dict[bytes, bytes], start: bytes, stop: bytes | None, reverse: bool) -> list[tuple[bytes, bytes]]:
    items = sorted((k, v) for k, v in model.items() if k >= start and (stop is None or k < stop))
    return items[::-1] if reverse else items


def _engine(made: Any) -> Engine:
    """What ``open_engine()`` returned, refused with the reason unless it is a raw engine."""
    if isinstance(made, Checked):
        raise TypeError(
            "open_engine() returned a store's store.engine, the checked layer of an open store (which holds "
            "the store's settings already): return blobpad.engine.open_engine(target) instead"
        )
    if not all(hasattr(made, name) for name in ("read", "write", "close", "capabilities", "target")):
        raise TypeError(f"open_engine() returned {type(made).__name__}, not an engine (blobpad.engine.Engine)")
    return made


class _Thread(threading.Thread):
    """A thread whose exception is re-raised by :meth:`finish`, which waits a bounded time."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._fn = fn
        self.error: BaseException | None = None
        self.result: Any = None

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def finish(self) -> Any:
        self.join(_WAIT)
        assert not self.is_alive(), f"a thread did not finish within {_WAIT} s: the engine hangs"
        if self.error is not None:
            raise self.error
        return self.result


def _writers(db: Checked, fn: Callable[[WriteTxn], None], threads: int, rounds: int) -> None:
    """Run ``db.write(fn)`` ``rounds`` times in each of ``threads`` threads at once; re-raise a thread's error."""

    def worker() -> None:
        for _ in range(rounds):
            db.write(fn)

    workers = [_Thread(worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.finish()


class EngineTests:
    """The contract every engine passes (see the module docstring)."""

    @pytest.fixture
    def open_engine(self) -> Iterator[Callable[[], Engine]]:
        """Override: yield a function returning a holder of one fresh store's engine."""
        raise NotImplementedError("a subclass of EngineTests provides the open_engine fixture")

    @pytest.fixture
    def db(self, open_engine: Callable[[], Engine]) -> Checked:
        return Checked(_engine(open_engine()))

    # -- basics ---------------------------------------------------------------------

    def test_capabilities_are_stated(self, db: Checked) -> None:
        caps = db.capabilities
        assert isinstance(caps, Capabilities)
        assert caps.name and caps.durability
        assert all(isinstance(v, bool) for k, v in caps.to_dict().items() if k not in ("name", "durability"))
        assert isinstance(db.engine.target, str) and db.engine.target

    def test_an_empty_store_has_nothing(self, db: Checked) -> None:
        with db.read() as txn:
            for space in SPACES:
                assert txn.get(space, b"k") is None
                assert _scan(txn, space) == []
                assert txn.recorded_count(space) in (0, None)

    def test_put_get_delete_in_every_keyspace(self, db: Checked) -> None:
        def values(space: str) -> list[bytes]:  # up to the longest value the keyspace allows
            return [b"", b"\x00", bytes(range(32)), b"x" * min(1 << 20, VALUE_LIMITS[space] - SEAL_SIZE)]

        def fill(txn: WriteTxn) -> None:
            for space in SPACES:
                for i, value in enumerate(values(space)):
                    txn.put(space, b"key%d" % i, value)

        db.write(fill)
        with db.read() as txn:
            for space in SPACES:
                assert [txn.get(space, b"key%d" % i) for i in range(4)] == values(space)
                assert txn.recorded_count(space) in (4, None)
        for space in (s for s in SPACES if VALUE_LIMITS[s] <= 4 << 20):  # one byte more is refused, nothing written
            with pytest.raises(InvalidArgument, match="over the store's limit"):
                db.write(lambda txn, space=space: txn.put(space, b"big", b"y" * (VALUE_LIMITS[space] - SEAL_SIZE + 1)))
        with db.read() as txn:
            assert all(txn.get(space, b"big") is None for space in SPACES)
        assert db.write(lambda txn: txn.delete("entries", b"key1")) is True
        assert db.write(lambda txn: txn.delete("entries", b"key1")) is False
        with db.read() as txn:
            assert txn.get("entries", b"key1") is None
            assert txn.get("manifests", b"key1") == b"\x00"  # keyspaces are apart

    def test_values_are_bytes_never_read_as_anything_else(self, db: Checked) -> None:
        """An engine stores values; it does not interpret them: values shaped like an engine's
        own markers (a pointer, a version, a tombstone) round-trip in every keyspace,
        replaced and deleted, in commits that are all or nothing."""
        shapes = [b"\0ptr", b"\0ptr0000000005somekey", b"\0ptr" + bytes(range(30)), b"000000000001x", b"\0", b""]
        for space in SPACES:
            db.write(lambda txn, sp=space: [txn.put(sp, b"shape/%d" % i, v) for i, v in enumerate(shapes)])
            with db.read() as txn:
                assert [txn.get(space, b"shape/%d" % i) for i in range(len(shapes))] == shapes, space
            db.write(lambda txn, sp=space: [txn.put(sp, b"shape/%d" % i, v[::-1] + b"!") for i, v in enumerate(shapes)])
            with db.read() as txn:
                assert [txn.get(space, b"shape/%d" % i) for i in range(len(shapes))] == [v[::-1] + b"!" for v in shapes]
            db.write(lambda txn, sp=space: [txn.delete(sp, b"shape/%d" % i) for i in range(len(shapes))])
            with db.read() as txn:
                assert _scan(txn, space, b"shape/", b"shape0") == [], space

    def test_the_longest_key_and_binary_keys(self, db: Checked) -> None:
        keys = [b"\xff" * 511, b"\x00", b"\x00\x00", b"\xff", bytes(range(1, 256))]
        db.write(lambda txn: [txn.put("names", k, k[:8]) for k in keys])
        with db.read() as txn:
            assert _scan(txn, "names") == sorted((k, k[:8]) for k in keys)

    def test_a_write_returns_what_its_function_returns(self, db: Checked) -> None:
        assert db.write(lambda txn: 42) == 42
        assert db.write(lambda txn: None) is None

    # -- ordered scans against a model -------------------------------------------------

    def test_scans_match_a_model(self, db: Checked) -> None:
        rng = random.Random(1313)
        model: dict[bytes, bytes] = {}
        alphabet = [b"", b"\x00", b"a", b"ab", b"b", b"\xff", b"\xfe\xff"]
        for _round in range(40):
            ops = []
            for _ in range(rng.randint(1, 12)):
                key = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3))) or b"k"
                if rng.random() < 0.3:
                    ops.append((key, None))
                else:
                    ops.append((key, rng.randbytes(rng.randint(0, 40))))

            def apply(txn: WriteTxn, ops: list[tuple[bytes, bytes | None]] = ops) -> None:
                for key, value in ops:
                    if value is None:
                        txn.delete("by_seq", key)
                    else:
                        txn.put("by_seq", key, value)

            db.write(apply)
            for key, value in ops:
                if value is None:
                    model.pop(key, None)
                else:
                    model[key] = value
            with db.read() as txn:
                assert _scan(txn, "by_seq") == _model_scan(model, b"", None, False)
                for _ in range(6):
                    start = rng.choice(alphabet) + rng.choice(alphabet)
                    stop = rng.choice([None, rng.choice(alphabet) + rng.choice(alphabet)])
                    reverse = rng.random() < 0.5
                    assert _scan(txn, "by_seq", start, stop, reverse) == _model_scan(model, start, stop, reverse)
                prefix = rng.choice(alphabet)
                assert _scan(txn, "by_seq", prefix, prefix_end(prefix)) == [
                    (k, v) for k, v in _model_scan(model, b"", None, False) if k.startswith(prefix)
                ]

    def test_a_long_scan_sees_every_key_once_in_order(self, db: Checked) -> None:
        keys = [i.to_bytes(4, "big") for i in range(3000)]
        db.write(lambda txn: [txn.put("expiry", k, b"") for k in keys])
        with db.read() as txn:
            assert [k for k, _ in txn.scan("expiry")] == keys
            assert [k for k, _ in txn.scan("expiry", reverse=True)] == keys[::-1]
            assert [k for k, _ in txn.scan("expiry", keys[700], keys[2900])] == keys[700:2900]

    # -- write transactions --------------------------------------------------------------

    def test_a_write_reads_its_own_writes(self, db: Checked) -> None:
        db.write(lambda txn: [txn.put("entries", k, b"old") for k in (b"a", b"c", b"e")])

        def fn(txn: WriteTxn) -> tuple[Any, ...]:
            txn.put("entries", b"b", b"new")
            txn.put("entries", b"c", b"changed")
            txn.delete("entries", b"e")
            seen = (txn.get("entries", b"b"), txn.get("entries", b"c"), txn.get("entries", b"e"),
                    _scan(txn, "entries"), _scan(txn, "entries", reverse=True), txn.recorded_count("entries"))
            txn.put("entries", b"e", b"back")
            return (*seen, txn.get("entries", b"e"))

        b, c, e, forward, backward, count, e_again = db.write(fn)
        assert (b, c, e, e_again) == (b"new", b"changed", None, b"back")
        assert forward == [(b"a", b"old"), (b"b", b"new"), (b"c", b"changed")]
        assert backward == forward[::-1]
        assert count in (3, None)

    def test_a_failed_write_leaves_nothing(self, db: Checked) -> None:
        db.write(lambda txn: txn.put("entries", b"kept", b"1"))

        def fn(txn: WriteTxn) -> None:
            txn.put("entries", b"new", b"2")
            txn.delete("entries", b"kept")
            raise ValueError("the caller failed")

        with pytest.raises(ValueError, match="the caller failed"):
            db.write(fn)
        with db.read() as txn:
            assert _scan(txn, "entries") == [(b"kept", b"1")]
        assert db.write(lambda txn: txn.get("entries", b"kept")) == b"1"  # and the engine writes on

    def test_writers_are_serializable(self, db: Checked) -> None:
        threads, rounds = 4, 50

        def bump(txn: WriteTxn) -> None:
            old = int(txn.get("meta", b"counter") or b"0")
            txn.put("meta", b"counter", str(old + 1).encode())
            txn.put("by_seq", (old + 1).to_bytes(4, "big"), b"")

        _writers(db, bump, threads, rounds)
        with db.read() as txn:
            assert txn.get("meta", b"counter") == str(threads * rounds).encode()
            assert [k for k, _ in txn.scan("by_seq")] == [i.to_bytes(4, "big") for i in range(1, threads * rounds + 1)]

    def test_a_scan_in_a_write_sees_no_phantoms(self, db: Checked) -> None:
        """Writers that each count a range's keys and add the next one end with one key per write: a write
        whose range gained a key after it scanned it runs again (or waited), it does not commit blind."""
        threads, rounds = 4, 20
        db.write(lambda txn: txn.put("names", b"other", b""))  # keys outside the range change nothing

        def add_next(txn: WriteTxn) -> None:
            n = sum(1 for _ in txn.scan("names", b"slot/", b"slot0"))
            txn.put("names", b"slot/%04d" % n, b"%d" % n)
            txn.put("names", b"other", b"%d" % n)

        _writers(db, add_next, threads, rounds)
        with db.read() as txn:
            assert [k for k, _ in txn.scan("names", b"slot/", b"slot0")] == [
                b"slot/%04d" % i for i in range(threads * rounds)
            ]

    # -- read snapshots ------------------------------------------------------------------

    def test_a_reader_sees_a_snapshot_and_does_not_block_a_writer(self, db: Checked) -> None:
        keys = [b"k%04d" % i for i in range(600)]
        db.write(lambda txn: [txn.put("chunks", k, b"v1") for k in keys])

        def change(txn: WriteTxn) -> None:
            for k in keys[::2]:
                txn.delete("chunks", k)
            for k in keys[1::2]:
                txn.put("chunks", k, b"v2")
            txn.put("chunks", b"k9999", b"new")

        with db.read() as txn:
            first = _scan(txn, "chunks")[:10]
            writer = _Thread(lambda: db.write(change))
            writer.start()
            writer.finish()  # it commits while this reader is open
            assert _scan(txn, "chunks") == [(k, b"v1") for k in keys]
            assert first == [(k, b"v1") for k in keys[:10]]
            assert txn.get("chunks", keys[0]) == b"v1" and txn.get("chunks", b"k9999") is None
            assert _scan(txn, "chunks", reverse=True)[0] == (keys[-1], b"v1")
        with db.read() as txn:
            assert _scan(txn, "chunks") == [(k, b"v2") for k in keys[1::2]] + [(b"k9999", b"new")]

    def test_a_pinned_snapshot_is_the_state_when_its_block_began(self, db: Checked) -> None:
        """A snapshot pinned by :meth:`Checked.pinned` never sees a commit made after its block
        began, even one made before its first read (an engine that fixes snapshots at the first
        read fixes a pinned one at once); a plain read sees every commit made before its first read."""
        db.write(lambda txn: txn.put("names", b"k", b"before"))
        with db.pinned() as txn:
            writer = _Thread(lambda: db.write(lambda t: [t.put("names", b"k", b"after"), t.put("names", b"new", b"x")]))
            writer.start()
            writer.finish()  # committed inside the block, before anything was read
            assert txn.get("names", b"k") == b"before"
            assert _scan(txn, "names") == [(b"k", b"before")]
            with db.read() as same:  # a read inside the block is the pinned snapshot
                assert same.get("names", b"new") is None
        with db.read() as txn:
            assert _scan(txn, "names") == [(b"k", b"after"), (b"new", b"x")]

    def test_a_key_made_after_a_snapshot_stays_absent_to_it_however_often_it_changes(self, db: Checked) -> None:
        """A key deleted, then made again and changed after a reader's snapshot, reads as the
        snapshot saw it (absent), by get and by scan, never as a value written after it."""
        db.write(lambda txn: [txn.put("names", b"k", b"old"), txn.put("names", b"other", b"x")])
        db.write(lambda txn: txn.delete("names", b"k"))
        with db.read() as txn:
            assert txn.get("names", b"other") == b"x"  # the snapshot is taken
            for value in (b"made", b"changed", b"changed again"):
                writer = _Thread(lambda v=value: db.write(lambda w: w.put("names", b"k", v)))
                writer.start()
                writer.finish()
            assert txn.get("names", b"k") is None
            assert _scan(txn, "names") == [(b"other", b"x")]
            assert _scan(txn, "names", reverse=True) == [(b"other", b"x")]
        with db.read() as txn:
            assert txn.get("names", b"k") == b"changed again"

    def test_a_failed_write_ends_while_other_threads_read_and_write(self, db: Checked) -> None:
        """Readers that never pause, a read held open, and another writer, do not hold up a
        write whose function raises: it leaves nothing and returns while they still run
        (py-lmdb's abort waited for every other thread's LMDB call to end: a failed write,
        and every writer behind it, waited for as long as the readers read)."""
        db.write(lambda txn: [txn.put("chunks", b"k%03d" % i, b"v" * 50) for i in range(200)])
        stop = threading.Event()
        deadline = time.monotonic() + _WAIT

        def reader() -> int:
            rounds = 0
            while not stop.is_set() and time.monotonic() < deadline:
                with db.read() as txn:
                    txn.get("meta", b"absent")
                    rounds += sum(1 for _ in txn.scan("chunks", b"k", b"l")) > 0
            return rounds

        def writer() -> int:
            rounds = 0
            while not stop.is_set() and time.monotonic() < deadline:
                db.write(lambda txn, n=rounds: txn.put("meta", b"other", b"%d" % n))
                rounds += 1
            return rounds

        class Refused(Exception):
            pass

        def failing(txn: WriteTxn) -> None:
            txn.put("meta", b"partial", b"1")
            raise Refused

        inside, leave = threading.Event(), threading.Event()

        def long_reader() -> int:  # a read that stays open (a long search) between two reads
            with db.read() as txn:
                txn.get("meta", b"absent")
                inside.set()
                leave.wait(_WAIT)
                return sum(1 for _ in txn.scan("chunks", b"k", b"l"))

        threads = [_Thread(reader), _Thread(reader), _Thread(writer), _Thread(long_reader)]
        for t in threads:
            t.start()
        try:
            assert inside.wait(_WAIT)
            for _ in range(3):
                with pytest.raises(Refused):
                    db.write(failing)
            running = [t.is_alive() for t in threads]
        finally:
            stop.set()
            leave.set()
        assert [t.finish() > 0 for t in threads] == [True] * 4
        assert running == [True] * 4, "the failed writes returned only once the others had stopped"
        with db.read() as txn:
            assert txn.get("meta", b"partial") is None

    def test_a_commit_is_seen_whole_or_not_at_all(self, db: Checked) -> None:
        """A reader running while commits land sees each one whole: every key a commit wrote
        (in several keyspaces) holds that commit's value, or every key it deleted is gone;
        never some keys of one commit beside keys of the one before."""
        keys = [(space, b"atom/%d" % i) for i, space in enumerate(("meta", "names", "chunks", "entries") * 3)]
        rounds = 120
        done = threading.Event()

        def writer() -> None:
            try:
                for v in range(1, rounds + 1):
                    if v % 5 == 0:
                        db.write(lambda txn: [txn.delete(space, key) for space, key in keys])
                    else:
                        db.write(lambda txn, v=v: [txn.put(space, key, b"%d" % v) for space, key in keys])
            finally:
                done.set()

        def reader() -> int:
            seen = 0
            deadline = time.monotonic() + _WAIT
            while not done.is_set() and time.monotonic() < deadline:
                with db.read() as txn:
                    values = {txn.get(space, key) for space, key in keys}
                assert len(values) == 1, f"one read saw parts of several commits: {sorted(map(repr, values))}"
                seen += 1
            return seen

        readers = [_Thread(reader) for _ in range(2)]
        w = _Thread(writer)
        for t in readers:
            t.start()
        w.start()
        w.finish()
        assert sum(t.finish() for t in readers) > 0

    def test_readers_of_several_versions_each_keep_theirs(self, db: Checked) -> None:
        db.write(lambda txn: txn.put("refs", b"x", b"0"))
        opened = [threading.Event() for _ in range(3)]
        release = threading.Event()

        def reader(i: int) -> tuple[Any, ...]:
            with db.read() as txn:
                first = txn.get("refs", b"x")
                opened[i].set()
                assert release.wait(_WAIT)
                return first, txn.get("refs", b"x"), _scan(txn, "refs")

        readers = []
        for i in range(3):
            r = _Thread(lambda i=i: reader(i))
            r.start()
            readers.append(r)
            assert opened[i].wait(_WAIT)
            db.write(lambda txn, v=i + 1: txn.put("refs", b"x", str(v).encode()))
        release.set()
        for i, r in enumerate(readers):
            first, again, scanned = r.finish()
            assert first == again == str(i).encode() and scanned == [(b"x", str(i).encode())]
        with db.read() as txn:
            assert txn.get("refs", b"x") == b"3"

    def test_concurrent_readers_in_threads(self, db: Checked) -> None:
        db.write(lambda txn: [txn.put("digests", b"%03d" % i, b"%d" % i) for i in range(200)])
        barrier = threading.Barrier(4, timeout=_WAIT)

        def reader() -> int:
            with db.read() as txn:
                barrier.wait()  # four snapshots open at once
                return len(_scan(txn, "digests"))

        readers = [_Thread(reader) for _ in range(4)]
        for r in readers:
            r.start()
        assert [r.finish() for r in readers] == [200] * 4

    # -- one transaction per thread ----------------------------------------------------

    def test_a_transaction_inside_another_is_refused(self, db: Checked) -> None:
        with db.read():
            with pytest.raises(BlobpadError, match="inside another"), db.read():
                pass
            with pytest.raises(BlobpadError, match="inside another"):
                db.write(lambda txn: None)

        def nested(txn: WriteTxn) -> None:
            with db.read():
                pass

        with pytest.raises(BlobpadError, match="inside another"):
            db.write(nested)
        assert db.write(lambda txn: 7) == 7  # nothing stays held

    # -- integrity at the seam ------------------------------------------------------------

    def test_damage_reads_as_corrupt_data(self, db: Checked) -> None:
        good = seal("entries", b"good", b"value")
        moved = seal("entries", b"elsewhere", b"value")  # a record moved to another key
        flipped = bytearray(good)
        flipped[1] ^= 0x10

        def raw(txn: Any) -> None:  # the engine's own transaction: bytes stored as given
            txn.put("entries", b"good", good)
            txn.put("entries", b"moved", moved)
            txn.put("entries", b"flipped", bytes(flipped))
            txn.put("entries", b"short", b"abc")
            txn.put("manifests", b"good", good)  # another keyspace's seal
            txn.put("entries", b"cut", good[:-1])  # the end cut off: the seal no longer fits
            txn.put("entries", b"headless", good[1:])
            # sealed right but longer than its keyspace allows: no put stores that, so it is damage
            txn.put("refs", b"long", seal("refs", b"long", b"r" * (VALUE_LIMITS["refs"] - SEAL_SIZE + 1)))
            txn.put("refs", b"fits", seal("refs", b"fits", b"r" * (VALUE_LIMITS["refs"] - SEAL_SIZE)))

        db.engine.write(raw)
        with db.read() as txn:
            assert txn.get("entries", b"good") == b"value"
            for key in (b"moved", b"flipped", b"short", b"cut", b"headless"):
                with pytest.raises(CorruptData):
                    txn.get("entries", key)
            assert txn.get("refs", b"fits") == b"r" * (VALUE_LIMITS["refs"] - SEAL_SIZE)
            with pytest.raises(CorruptData, match="claims"):
                txn.get("refs", b"long")
            with pytest.raises(CorruptData):
                txn.get_many("refs", [b"fits", b"long"])
            over: list[bytes] = []
            assert [k for k, _ in txn.scan("refs", on_damage=over.append)] == [b"fits"]
            assert over == [b"long"]
            with pytest.raises(CorruptData):
                txn.get("manifests", b"good")
            with pytest.raises(CorruptData):
                _scan(txn, "entries")
            damaged: list[bytes] = []
            assert list(txn.scan("entries", on_damage=damaged.append)) == [(b"good", b"value")]
            assert sorted(damaged) == [b"cut", b"flipped", b"headless", b"moved", b"short"]
            assert txn.get_unchecked("entries", b"short") == b"abc"

    # -- size, compaction, close -------------------------------------------------------------

    def test_size_and_compaction_follow_the_capabilities(self, db: Checked) -> None:
        db.write(lambda txn: [txn.put("chunks", b"%06d" % i, b"z" * 4000) for i in range(300)])
        assert db.engine.size() > 0
        db.write(lambda txn: [txn.delete("chunks", b"%06d" % i) for i in range(300)])
        if db.capabilities.compaction:
            before, after = db.engine.compact()
            assert 0 <= after <= before
        else:
            with pytest.raises(BlobpadError):
                db.engine.compact()
        with db.read() as txn:
            assert _scan(txn, "chunks") == []

    def test_two_holders_share_one_store(self, open_engine: Callable[[], Engine]) -> None:
        a, b = Checked(_engine(open_engine())), Checked(_engine(open_engine()))
        a.write(lambda txn: txn.put("names", b"n", b"1"))
        with b.read() as txn:
            assert txn.get("names", b"n") == b"1"
        b.engine.close()  # one holder lets go: the other keeps the store
        with a.read() as txn:
            assert txn.get("names", b"n") == b"1"

    def test_a_transaction_of_one_holder_inside_anothers_is_refused(self, open_engine: Callable[[], Engine]) -> None:
        """Two handles of one store are one store to the nesting rule: a transaction opened through
        one inside a transaction of the other, in the same thread, is refused at once on every engine
        (on LMDB it would hang at the next map growth), and nothing stays held."""
        a, b = Checked(_engine(open_engine())), Checked(_engine(open_engine()))
        try:
            with a.read():
                with pytest.raises(BlobpadError, match="inside another"), b.read():
                    pass
                with pytest.raises(BlobpadError, match="inside another"):
                    b.write(lambda txn: txn.put("names", b"n", b"inner"))

            def nested(txn: WriteTxn) -> None:
                txn.put("names", b"n", b"outer")
                b.write(lambda inner: inner.put("names", b"n", b"inner"))

            with pytest.raises(BlobpadError, match="inside another"):
                a.write(nested)
            with b.read() as txn:
                assert txn.get("names", b"n") is None  # neither write was committed
            assert b.write(lambda txn: 7) == 7 and a.write(lambda txn: 8) == 8
        finally:
            b.engine.close()
            a.engine.close()

    def test_closed_engine_refuses_use(self, open_engine: Callable[[], Engine]) -> None:
        engine = _engine(open_engine())
        engine.close()
        engine.close()  # idempotent
        with pytest.raises(BlobpadError), engine.read():
            pass
        with pytest.raises(BlobpadError):
            engine.write(lambda txn: None)


#: no test may take longer than this (seconds): past it, every thread's stack is printed and
#: the run ends, so a hang fails CI at once instead of holding it until its time limit
TEST_TIME_LIMIT = 900


@pytest.fixture(autouse=True)
def no_test_hangs() -> Iterator[None]:
    """An autouse fixture: import it into a conftest.py to end the run when a test hangs
    (``faulthandler`` prints every thread's stack after :data:`TEST_TIME_LIMIT` seconds)."""
    faulthandler.dump_traceback_later(TEST_TIME_LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
