"""Storage engines behind one contract (:mod:`blobpad.engine.base`), and how a target picks one.

A *target* names a store: a directory path (the LMDB engine, the default; a leading ``~``
is the home directory, as in a shell, and white space at either end is refused), or a URL:

* ``memory://`` (a new private in-memory store) or ``memory://NAME`` (shared by the
  stores of this process that open the same name while one is open);
* ``lmdb:///absolute/path`` or ``file:///absolute/path``, the same as the bare path;
* ``redis://host:port/db`` (one Redis or Valkey server) or ``redis+cluster://host:port``
  (a Redis Cluster, any node), options in the query string (:mod:`blobpad.engine.redis`).

``blobpad.open()``, the CLI's ``--db``, ``blobpad mcp --db`` and the ``BLOBPAD_STORE``
environment variable all take the same string.  Without one, the store is
``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR`` (the older name), else the platform's user
data directory.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import InvalidArgument
from .base import SPACES, Capabilities, Checked, Engine, ReadTxn, WriteTxn, prefix_end, skip_damaged
from .lmdb import LMDB_OPTIONS, acquire_lmdb
from .memory import acquire_memory
from .redis import REDIS_OPTIONS, SCHEMES, acquire_redis  # redis-py: imported at first use
from .targets import URL_SCHEME, shown_target

__all__ = [
    "SPACES", "Capabilities", "Checked", "Engine", "ReadTxn", "WriteTxn", "prefix_end", "skip_damaged", "open_engine",
    "default_target", "env_target", "LMDB_OPTIONS",
]

#: the environment variable naming the default store (a path or a URL)
ENV_VAR = "BLOBPAD_STORE"


def env_target() -> str | None:
    """``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR`` (the older name), else None (empty counts as unset)."""
    for name in (ENV_VAR, "BLOBPAD_DIR"):
        value = os.environ.get(name)
        if value:
            return value
    return None


def default_target() -> str:
    """``$BLOBPAD_STORE``, else ``$BLOBPAD_DIR``, else the platform's user data directory."""
    value = env_target()
    if value is not None:
        return value
    import platformdirs

    return platformdirs.user_data_dir("blobpad", appauthor=False)


def open_engine(target: str | os.PathLike[str] | None = None, **options: Any) -> Engine:
    """Open the engine a target names (see the module docstring); ``options`` are the engine's own.

    Raises InvalidArgument for a target of another type, an unknown URL scheme, or an
    option the engine does not take.
    """
    if target is None:
        target = default_target()
    if not isinstance(target, (str, os.PathLike)):
        raise InvalidArgument(f"a store is a path or a URL such as memory://, not {type(target).__name__}")
    try:
        text = os.fspath(target)
    except TypeError:  # an object whose __fspath__ gives neither str nor bytes
        raise InvalidArgument(
            f"a store path object ({type(target).__name__[:80]}) whose __fspath__() gives neither text nor bytes"
        ) from None
    if isinstance(text, bytes):
        raise InvalidArgument("a store path must be text, not bytes")
    if "\0" in text:  # no path or URL holds one; the file system would raise its own ValueError
        raise InvalidArgument(f"{shown_target(text)}: a store path or URL holds no NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a name decoded with surrogateescape: LMDB takes UTF-8 paths only
        raise InvalidArgument(
            f"{shown_target(text)}: the store path is not valid UTF-8 (LMDB opens UTF-8 paths only); "
            "rename the directory"
        ) from None
    if text != text.strip():  # a line break from a CRLF file, mostly: it named another, empty store
        if _URL_SCHEME.match(text.strip()):
            raise InvalidArgument(f"{shown_target(text)}: a store URL with white space around it; "
                                  "remove it (a directory of that name is written ./...)")
        what = "is only white space" if not text.strip() else "has white space at its start or end"
        raise InvalidArgument(f"{shown_target(text)}: the store path {what} (a line break from a file with CRLF line ends?); "
                              "remove it")
    scheme, sep, rest = text.partition("://")
    if not sep:
        lone = _lone_colon_url(text)  # memory:, file:/abs, redis:/x ...: a URL, not a directory of that name
        if lone is not None:
            _refuse_foreign("LMDB", text, options)
            return acquire_lmdb(_url_path(text, lone), **options)
    if not sep or not _URL_SCHEME.fullmatch(scheme + ":"):
        _refuse_foreign("LMDB", text, options)
        return acquire_lmdb(_plain_path(text), **options)  # a plain path (a directory name may contain "://")
    scheme = scheme.lower()
    if scheme == "memory":
        _refuse_foreign("memory", text, options)
        return acquire_memory("memory://" + rest, **options)
    if scheme in ("lmdb", "file"):
        _refuse_foreign("LMDB", text, options)
        return acquire_lmdb(_url_path(text, scheme), **options)
    if scheme in SCHEMES:
        return acquire_redis(text, **options)
    raise InvalidArgument(
        f"unknown store URL scheme {scheme[:40]!r} in {shown_target(text)}: use a directory path, memory://, "
        "redis://host:port/db or redis+cluster://host:port"
    )


def _plain_path(text: str) -> str:
    """A target that is a directory path, as LMDB opens it: a leading ``~`` or ``~user`` is that
    home directory, as in a shell (a target often comes from a configuration file that no shell
    reads, such as an MCP client's)."""
    if text.startswith("~"):
        expanded = os.path.expanduser(text)
        if expanded.startswith("~"):
            raise InvalidArgument(f"{shown_target(text)}: no such user's home directory; for a directory whose name starts "
                                  "with ~, write ./" + shown_target(text)[1:-1])
        return expanded
    return text


#: what starts a URL: a scheme (:data:`~blobpad.engine.targets.URL_SCHEME`, RFC 3986's) and a
#: colon; a target starting so with "://" is a URL, never a directory (``redis-cluster://...``
#: is an unknown scheme, not a directory of that name)
_URL_SCHEME = re.compile(URL_SCHEME + r":(?=/|$)")

#: the schemes a target names, whatever the engine
_SCHEMES = frozenset({"memory", "lmdb", "file", *SCHEMES})


def _lone_colon_url(text: str) -> str | None:
    """For a target that starts with a store URL's scheme and a colon but not ``://``: the
    scheme, when it is ``file:/abs`` or ``lmdb:/abs`` (a file URL of one slash, RFC 8089: that
    absolute directory); InvalidArgument for any other (``memory:``, ``redis:/x``); None for
    a target that names no scheme (a directory path).  Such targets used to open a directory
    named after the whole string under the working directory: ``memory:`` a store on disk."""
    head, colon, tail = text.partition(":")
    scheme = head.lower()
    if not colon or scheme not in _SCHEMES:
        return None
    if scheme in ("lmdb", "file") and tail.startswith("/"):  # not "//": the text holds no "://"
        return scheme
    example = {"memory": "memory:// or memory://NAME", "lmdb": "lmdb:///absolute/path",
               "file": "file:///absolute/path"}.get(scheme, f"{scheme}://host:port/db")
    raise InvalidArgument(
        f"{shown_target(text)} is not a store URL (a scheme and '://'): write {example}; for a "
        f"directory of that name, write ./{head}:..."
    )


def _url_path(text: str, scheme: str) -> str:
    """The directory of a ``lmdb://`` or ``file://`` URL: its path, percent-decoded; a
    host other than localhost, a relative path, a query or a fragment is InvalidArgument
    (options are keyword arguments; a ``?`` or ``#`` of a directory name is written
    ``%3F``, ``%23``)."""
    if any(ch in text for ch in "\t\r\n"):  # urlsplit would drop them: another directory
        raise InvalidArgument(f"{shown_target(text)}: a {scheme}:// URL holds a tab or a line break; write them as %09, %0D, %0A")
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise InvalidArgument(f"{shown_target(text)}: a {scheme}:// URL takes an absolute path, like {scheme}:///var/blobpad")
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise InvalidArgument(
            f"{shown_target(text)}: a {scheme}:// URL takes no query string or fragment; pass the LMDB engine's options as "
            "keyword arguments (blobpad.open(path, sync=False)), and write a ? or # of a directory name as %3F or %23"
        )
    try:
        path = unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{shown_target(text)}: a percent escape of the path is not UTF-8") from None
    if "\0" in path:
        raise InvalidArgument(f"{shown_target(text)}: the path holds a NUL character")
    return path


def _refuse_foreign(engine: str, target: str, options: dict[str, Any]) -> None:
    """InvalidArgument naming the engine an option belongs to, when it is another's
    (``namespace`` given to a memory store); options no engine has are left to the
    engine's own check."""
    owners = {"LMDB": LMDB_OPTIONS, "Redis": REDIS_OPTIONS}
    mine = owners.get(engine, {})
    for name in sorted(options, key=str):
        owner = next((other for other, known in owners.items() if name in known and other != engine), None)
        if name in mine or owner is None:
            continue
        if engine == "memory":
            raise InvalidArgument(
                f"{name} is an option of the {owner} engine; the memory engine ({shown_target(target)}) takes none"
            )
        raise InvalidArgument(
            f"{name} is an option of the {owner} engine, not of the {engine} engine; its options are {', '.join(mine)}"
        )
