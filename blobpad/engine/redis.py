"""The Redis / Valkey engine: one store shared by processes on many hosts.

Targets: ``redis://[user:password@]host:port/db`` (also ``rediss://`` with TLS, and
``valkey://``, ``valkeys://`` as other names of the same) for one server, and
``redis+cluster://host:port`` (or ``valkey+cluster://``; any node) for a Redis Cluster.
Options go in the query string or as keyword arguments of ``blobpad.open``:

* ``namespace`` (default ``blobpad``): several stores share one server, each under its own;
* ``snapshot_seconds`` (default 300): how long a reader's snapshot stays readable while
  others write (see below);
* ``retry_seconds`` (default 20): how long transient errors (a lost connection, a
  failover, ``LOADING``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MOVED``, ``ASK``, ``READONLY``)
  are retried with backoff before a clear :class:`~blobpad.BlobpadError`;
* ``timeout`` (default 10): seconds a single command may take on the socket;
* ``wait_replicas`` (default 0) and ``wait_timeout`` (default 5): a commit is acknowledged
  only once that many replicas confirmed it (``WAIT``, on the commit's own connection),
  waiting up to ``wait_timeout`` seconds; fewer is a :class:`~blobpad.BlobpadError`
  saying the write is on the primary only.

How the contract is kept on a server that has no transactions of its own:

* **Keys.** Every key of a store's catalog starts with ``bp:{NAMESPACE}:``.  The braces
  are a cluster hash tag, so the catalog lives in one slot, hence on one node of a cluster,
  and one Lua script can read and write all of it (as JuiceFS keeps its metadata).  Each
  keyspace is a sorted set of its keys (ordered scans with ``ZRANGEBYLEX``) beside a hash
  of their values; each value carries the version that wrote it.
* **Chunks**, on a cluster, are keys of their own, ``bp:NAMESPACE:c:<chunk>:<copy>``,
  without a hash tag: they spread over every primary.  The catalog's ``chunks`` keyspace
  holds a pointer to each (``_PTR``, the length, the key).  A write stores its chunks
  first, leased for ``_LEASE_MS`` (``SET NX PX``), then commits; the commit lists them
  as unsettled (``pp``) and lists the chunk keys it frees (``px``: replaced or deleted
  pointers).  After the commit the writer settles both: ``PERSIST`` what it wrote,
  ``PEXPIRE`` what it freed past ``snapshot_seconds`` and ``retry_seconds`` (old
  snapshots may still read them), and strikes them off (with its next commit).  A client
  killed before its commit leaves chunks that expire by themselves; one killed after it
  leaves lists that the next client to open the store or commit settles once they are
  ``_SETTLE_MS`` old.  The batches of a put in progress commit their chunks held
  (``hold_chunks``: leased, not listed), and the put's last commit lists every chunk of the
  entry (``keep_chunks``): a put killed between them leaves only chunks that expire.  A
  key is never reused (``<copy>`` is random), so freeing one copy of a chunk never
  touches a later one.  The one race left costs space, not data: a
  chunk freed while another client settles it as made can stay permanent without a
  pointer; ``gc()`` finds those (:meth:`RedisEngine.collect`).
* **Writes** are optimistic: ``write(fn)`` runs ``fn`` against a snapshot, keeping its
  writes aside (it reads them back), then one script checks that nothing it read changed
  since the snapshot and applies every write at a new version, atomically.  On a
  conflict, ``fn`` runs again (the contract allows it); a write that conflicted
  ``_TURN_AFTER`` times claims the turn to go first (``first``, ``SET NX PX``): the other
  commits yield until it commits or the claim ends, so a long write among many short ones
  is not starved.  Each commit carries a token, so
  a commit whose reply was lost is found applied and not applied again; the server keeps
  the token twice as long as a client may take to ask (its ``timeout`` plus
  ``retry_seconds``), at least a minute.
* **A slot on the move.**  While a resharding moves the catalog's slot to another node,
  a script's commands meet keys the node no longer (or not yet) holds; Redis fails the
  script there and keeps what it wrote before.  So every script first touches two keys
  that never exist (``moving:0``, ``moving:1``), which such a node refuses at once, before
  anything is read or written, and the refusal is retried like ``ASK`` and ``TRYAGAIN``
  until the slot has moved (within ``retry_seconds``).
* **Snapshots.**  A commit that replaces or deletes a value keeps the old one for
  ``snapshot_seconds`` (by the server's clock), so an open reader still reads the
  state it started from.  A reader that stays open longer while others write gets a clear
  error, never a mix of states.  Deleting an entry therefore frees its memory
  ``snapshot_seconds`` after the deletion, at the next write; on a full server at once
  (see below).
* **Integrity** is the contract's (:class:`~blobpad.engine.base.Checked`): every value
  is sealed with a checksum bound to its keyspace and key, so a value damaged or lost in
  a failover reads as :class:`~blobpad.CorruptData`.  The sorted sets that order the keys
  hold every member at score 0 (``ZRANGEBYLEX`` is undefined otherwise): a scan checks
  that the keys it gets lie in its range and in order (CorruptData, never another
  session's keys), ``verify()`` reports a member at another score, ``gc()`` puts it back.
* **A full server** (``maxmemory`` reached) refuses a commit before it changes anything:
  :class:`~blobpad.StoreFull`.  Commits that free space (``write(fn, frees=True)``:
  delete, gc) are let through, and a refused commit first drops every old value kept for
  snapshots and the chunk keys only those name (:meth:`RedisEngine._make_room`), then runs
  once more: the room deletes made is usable at once, not ``snapshot_seconds`` later (a
  reader whose snapshot needed a dropped value is told to read again).  An eviction policy
  other than ``noeviction`` is refused at open: the server would drop parts of entries.

Durability is the server's (``capabilities.durability`` states its setting found at
open): with ``appendonly yes`` and ``appendfsync always`` an
acknowledged put survives a killed server and a power loss; with ``appendfsync
everysec`` up to about a second of puts can be lost on a power loss (a killed server
process loses none: the server writes its AOF before it replies); without AOF, whatever
was written since the last RDB save.  Replication is asynchronous: a failover can lose
acknowledged puts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..errors import HINT_SERVER_FULL, HINT_VERIFY, BlobpadError, CorruptData, InvalidArgument, StoreFull, Unavailable, one_line
from .base import MAX_KEY, SPACES, Capabilities, RawReadTxn, RawWriteTxn, TxnGuard
from .targets import shown_target, without_password

__all__ = ["RedisEngine", "acquire_redis", "REDIS_OPTIONS", "SCHEMES"]

T = TypeVar("T")

#: the URL schemes of this engine, and whether each names a cluster
SCHEMES = {
    "redis": False, "rediss": False, "valkey": False, "valkeys": False,
    "redis+cluster": True, "rediss+cluster": True, "valkey+cluster": True, "valkeys+cluster": True,
}

#: the engine's options and their defaults (query string or keyword arguments)
REDIS_OPTIONS: dict[str, Any] = {
    "namespace": "blobpad",
    "snapshot_seconds": 300.0,
    "retry_seconds": 20.0,
    "timeout": 10.0,
    "wait_replicas": 0,
    "wait_timeout": 5.0,
}

_NAMESPACE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
#: what follows a store's chunk prefix in its chunk keys (see RedisEngine._chunk_key): the chunk, the copy
_CHUNK_KEY_TAIL = re.compile(rb"[0-9a-f]+:[0-9a-f]{16}")
_BATCH = 256  # keys a scan resolves per script call
_FIRST_PAGE = 16  # keys the first call of a scan resolves (then 64, then _BATCH)
#: the least time a commit's token is kept: a client that lost the reply of a commit asks
#: for its token within its socket timeout plus retry_seconds; the token is kept twice that
#: (RedisEngine._token_ms), and at least this long
_TOKEN_MIN_MS = 60_000
_CLOCK_SECONDS = 60.0  # how often the offset of the server's clock is measured again (by the monotonic clock)
_CLOCK_TRIES = 3  # round trips a measurement of the server's clock may take, keeping the shortest
_CLOCK_GOOD = 0.05  # a round trip this short ends the measurement at once (the offset is right within half of it)
_OPEN_SECONDS = 3.0  # how long opening retries a server that does not answer
_TRIM = 512  # old values dropped per commit at most
_GL_INLINE = 4  # versions of a key's old values kept inline in gl:s before they move to a sorted set
# On a cluster, each chunk is a key of its own (see "Chunks" in the module docstring):
_LEASE_MS = 86_400_000  # how long a chunk written before its commit lives unless the commit makes it permanent
_SETTLE_MS = 30_000  # a commit's chunks not yet made permanent (or freed) this long after it are another's to finish
_FREE_MARGIN_MS = 5_000  # a freed chunk outlives the snapshots that may still read it by this, and retry_seconds
_TURN_AFTER = 5  # conflicts of one write after which it claims the turn to go first (RedisEngine._claim_turn)
_TURN_MS = 2_000  # how long such a claim lasts at most
_PTR = b"\0ptr"  # the catalog's value of a chunk stored under its own key: this, its length, its key


def _pointer(name: bytes, length: int) -> bytes:
    """The catalog's value for a chunk of ``length`` bytes stored under the key ``name``."""
    return _PTR + b"%010d" % length + name


def _pointed(value: bytes | None) -> bytes | None:
    """The chunk key a catalog value points to (None if it is not a pointer)."""
    return value[14:] if value is not None and value[:4] == _PTR else None

# Every script declares one key, the store's version counter ``bp:{ns}:v``; the others
# share its hash tag, so they are in its slot.  A value is stored as 12 decimal digits of
# the version that wrote it, then the value.  The old values kept for snapshots ("graves")
# of keyspace s: hash g:s (key@version -> the value that version replaced), hash gl:s
# (key -> the versions that replaced or deleted it, 12 digits each, ascending), sorted sets
# gz:s (the keys that have any, by key) and gr:s (the same keys, scored by the version of
# their latest grave: a scan or a commit at snapshot S looks only at those above S, so the
# graves of a queue's deleted front cost nothing to the snapshots that began after them),
# and gq (every grave, scored by the server time it was made, for trimming).  hz is the
# newest version whose graves were trimmed: a snapshot older than it may have lost what it
# needs.  A write's commit checks the keys it read and, for each range it scanned, the part
# of the range the scan went through (up to the last key it yielded, or all of it): the keys
# it holds now (z:s) and those replaced or deleted since the snapshot (gr:s); any changed
# after its snapshot is a conflict.  gz:s is kept for stores still used by older versions.

# Byte-wise order and ZRANGEBYLEX bounds in Lua (its own string comparison follows the server's locale).
_LEX_FN = r"""
local function cmp(x, y)
  local n = math.min(#x, #y)
  for j = 1, n do
    local bx, by = string.byte(x, j), string.byte(y, j)
    if bx ~= by then if bx < by then return -1 end return 1 end
  end
  if #x == #y then return 0 end
  if #x < #y then return -1 end
  return 1
end
local function above(k, lo)
  if lo == '-' then return true end
  local c = cmp(k, string.sub(lo, 2))
  if string.sub(lo, 1, 1) == '[' then return c >= 0 end
  return c > 0
end
local function below(k, hi)
  if hi == '+' then return true end
  local c = cmp(k, string.sub(hi, 2))
  if string.sub(hi, 1, 1) == '[' then return c <= 0 end
  return c < 0
end
"""

# The versions that replaced or deleted key k of keyspace s: in hash gl:s, up to _GL_INLINE of
# them as 12-digit strings, ascending; a key replaced more often than that (a counters shard,
# rewritten by every put) has them in a sorted set of its own, gv:s NUL k, and "z" in gl:s, so
# that adding, finding and trimming one costs the same whatever their number.
_VERSIONS_FN = r"""
local function num(key)  -- a counter of the store's (its version, the last version trimmed); absent: 0
  local raw = redis.call('GET', key)
  if not raw then return 0 end
  local n = tonumber(raw)
  if not n then error(redis.error_reply('BLOBPAD-DAMAGED ' .. key)) end  -- RedisEngine._call: CorruptData
  return n
end
local function gv(P, s, k) return P .. 'gv:' .. s .. '\0' .. k end
local function after(P, s, k, S)  -- the first version above S, or nil
  local gl = redis.call('HGET', P .. 'gl:' .. s, k)
  if not gl then return nil end
  if gl == 'z' then return redis.call('ZRANGEBYSCORE', gv(P, s, k), '(' .. S, '+inf', 'LIMIT', 0, 1)[1] end
  for i = 1, #gl, 12 do
    local w = string.sub(gl, i, i + 11)
    if (tonumber(w) or 0) > S then return w end  -- 0: damaged
  end
  return nil
end
local function latest(P, s, k)  -- the last version, or 0
  local gl = redis.call('HGET', P .. 'gl:' .. s, k)
  if not gl then return 0 end
  if gl == 'z' then
    local w = redis.call('ZREVRANGE', gv(P, s, k), 0, 0)[1]
    if w then return tonumber(w) or 0 end
    return 0
  end
  return tonumber(string.sub(gl, -12)) or 0
end
local function add_version(P, s, k, W, W12)
  local gl = redis.call('HGET', P .. 'gl:' .. s, k)
  if gl == 'z' then
    redis.call('ZADD', gv(P, s, k), W, W12)
  elseif gl and #gl >= %(inline)d * 12 then
    local key = gv(P, s, k)
    for i = 1, #gl, 12 do
      local w = string.sub(gl, i, i + 11)
      redis.call('ZADD', key, tonumber(w), w)
    end
    redis.call('ZADD', key, W, W12)
    redis.call('HSET', P .. 'gl:' .. s, k, 'z')
  else
    redis.call('HSET', P .. 'gl:' .. s, k, (gl or '') .. W12)
  end
end
local function drop_version(P, s, k, w)  -- how many are left
  local gl = redis.call('HGET', P .. 'gl:' .. s, k)
  if not gl then return 0 end
  if gl == 'z' then
    local key = gv(P, s, k)
    redis.call('ZREM', key, w)
    local left = redis.call('ZCARD', key)
    if left == 0 then redis.call('HDEL', P .. 'gl:' .. s, k) end
    return left
  end
  local kept = {}
  for q = 1, #gl, 12 do
    local x = string.sub(gl, q, q + 11)
    if x ~= w then kept[#kept + 1] = x end
  end
  if #kept == 0 then
    redis.call('HDEL', P .. 'gl:' .. s, k)
  else
    redis.call('HSET', P .. 'gl:' .. s, k, table.concat(kept))
  end
  return #kept
end
""".replace("%(inline)d", str(_GL_INLINE))

# The version a stored value starts with.  The checksum that seals a value (above the
# engines) does not cover it: a damaged one (not 12 digits, or past the store's version
# counter V) counts as 0, written before every snapshot, so the value is read and its
# checksum decides, as on every engine: CorruptData, or the right bytes.  Without this a
# damaged version failed every script that met it, or hid the record as not yet written
# and made every write that read it conflict for ever.
_STAMP_FN = r"""
local function stamp(cur, V)
  local w = string.sub(cur, 1, 12)
  if not string.match(w, '^%d%d%d%d%d%d%d%d%d%d%d%d$') then return 0 end
  local n = tonumber(w)
  if n > V then return 0 end
  return n
end
"""

# The first command of every script after its prefix P: a slot being moved (a resharding) is
# refused before anything is read or written.  On the node it leaves, a key it no longer holds
# answers ASK; on the node it goes to, two keys of which it lacks one answer TRYAGAIN; inside a
# script both fail the script at once (its writes are not undone, so they must not have begun),
# and the client retries (RedisEngine._call, _send).
_MOVING = """redis.call('EXISTS', P .. 'moving:0', P .. 'moving:1')
"""

_RESOLVE = _LEX_FN + _VERSIONS_FN + _STAMP_FN + r"""
local P = string.sub(KEYS[1], 1, -2)
""" + _MOVING + r"""local V = num(KEYS[1])
local function at(s, k, S)
  local cur = redis.call('HGET', P .. 'h:' .. s, k)
  if cur and stamp(cur, V) <= S then return string.sub(cur, 13) end
  local w = after(P, s, k, S)
  if w then
    -- the value the first change after S replaced; written after S itself, the key was made
    -- after S (a creation keeps no old value): at S it was absent
    local prev = redis.call('HGET', P .. 'g:' .. s, k .. '@' .. w)
    if not prev or stamp(prev, V) > S then return false end
    return string.sub(prev, 13)
  end
  return false
end
"""

_READ_LUA = "#!lua flags=no-writes\n" + _RESOLVE + r"""
local S = tonumber(ARGV[1])
if S == nil then S = V end
if num(P .. 'hz') > S then return {-1} end
local op, s = ARGV[2], ARGV[3]
local out = {S}
if op == 'get' then
  for i = 3, #ARGV, 2 do out[#out + 1] = at(ARGV[i], ARGV[i + 1], S) end
  return out
end
local lo, hi, limit = ARGV[4], ARGV[5], tonumber(ARGV[7])
local reverse = ARGV[6] == '1'
-- every member scores 0, or ZRANGEBYLEX's answer is undefined (damage): said, never a partial listing
local z = P .. 'z:' .. s
if redis.call('ZCOUNT', z, '-inf', '(0') + redis.call('ZCOUNT', z, '(0', '+inf') > 0 then return {-3} end
local a
if reverse then
  a = redis.call('ZREVRANGEBYLEX', P .. 'z:' .. s, hi, lo, 'LIMIT', 0, limit)
else
  a = redis.call('ZRANGEBYLEX', P .. 'z:' .. s, lo, hi, 'LIMIT', 0, limit)
end
-- the keys replaced or deleted since S (so present at S, or changed since) in the range, up to
-- the page's last key when the page is full: only they can hold a value at S that z:s lacks
local b = {}
for _, k in ipairs(redis.call('ZRANGEBYSCORE', P .. 'gr:' .. s, '(' .. S, '+inf')) do
  if above(k, lo) and below(k, hi) then
    local inside = #a < limit
    if not inside then
      local c = cmp(k, a[#a])
      inside = (reverse and c >= 0) or (not reverse and c <= 0)
    end
    if inside then b[#b + 1] = k end
  end
end
out[2] = #a
out[3] = #b
for _, k in ipairs(a) do out[#out + 1] = k; out[#out + 1] = at(s, k, S) end
for _, k in ipairs(b) do out[#out + 1] = k; out[#out + 1] = at(s, k, S) end
return out
"""

_TRIM_FN = _VERSIONS_FN + r"""
local function trim(P, before, hz)
local old = redis.call('ZRANGEBYSCORE', P .. 'gq', '-inf', '(' .. before, 'LIMIT', 0, %(trim)d)
  for _, mem in ipairs(old) do
    local w = string.sub(mem, 1, 12)
    local rest = string.sub(mem, 13)
    local z = string.find(rest, '\0', 1, true)
    local s, k = string.sub(rest, 1, z - 1), string.sub(rest, z + 1)
    redis.call('HDEL', P .. 'g:' .. s, k .. '@' .. w)
    if drop_version(P, s, k, w) == 0 then
      redis.call('ZREM', P .. 'gz:' .. s, k)
      redis.call('ZREM', P .. 'gr:' .. s, k)
    end
    if tonumber(w) > hz then hz = tonumber(w) end
    redis.call('ZREM', P .. 'gq', mem)
  end
  if #old > 0 then redis.call('SET', P .. 'hz', hz) end
  return #old
end
""".replace("%(trim)d", str(_TRIM))

_WRITE_BODY = _TRIM_FN + _LEX_FN + _STAMP_FN + r"""
local P = string.sub(KEYS[1], 1, -2)
""" + _MOVING + r"""local token = P .. 'tok:' .. ARGV[3]
local done = redis.call('GET', token)
if done then return {tonumber(done)} end
if redis.call('GET', P .. 'id') ~= ARGV[4] then return {0, 'gone'} end  -- emptied or made again since the open
local first = redis.call('GET', P .. 'first')  -- a write that kept conflicting goes first (RedisEngine.write)
if first and first ~= ARGV[6] then return {0, 'yield'} end
local V = num(KEYS[1])
local S = tonumber(ARGV[1])
if S == nil then S = V end
local hz = num(P .. 'hz')
if hz > S then return {0, 'expired'} end
local function lastmod(s, k)
  local cur = redis.call('HGET', P .. 'h:' .. s, k)
  if cur then return stamp(cur, V) end
  return latest(P, s, k)
end
local held = ARGV[5] == '1'  -- the new chunks stay leased: a put still in progress holds them (hold_chunks)
local i = 7
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  if lastmod(ARGV[i], ARGV[i + 1]) > S then return {0, 'conflict'} end
  i = i + 2
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local s, lo, hi = ARGV[i], ARGV[i + 1], ARGV[i + 2]; i = i + 3
  for _, k in ipairs(redis.call('ZRANGEBYLEX', P .. 'z:' .. s, lo, hi)) do  -- written since S (new keys too)
    if lastmod(s, k) > S then return {0, 'conflict'} end
  end
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', P .. 'gr:' .. s, '(' .. S, '+inf')) do  -- replaced or deleted since S
    if above(k, lo) and below(k, hi) then return {0, 'conflict'} end
  end
end
local W = V + 1
local W12 = string.format('%012d', W)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], W)
local PTR = %(ptr)s  -- a cluster's pointer to a chunk under its own key; false on one server: no value is one
local out = {W, 0}
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local s, k, op, v = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]; i = i + 4
  local h = P .. 'h:' .. s
  local cur = redis.call('HGET', h, k)
  if cur then
    redis.call('HSET', P .. 'g:' .. s, k .. '@' .. W12, cur)
    add_version(P, s, k, W, W12)
    redis.call('ZADD', P .. 'gz:' .. s, 0, k)
    redis.call('ZADD', P .. 'gr:' .. s, W, k)
    redis.call('ZADD', P .. 'gq', now, W12 .. s .. '\0' .. k)
  end
  if s == 'chunks' then
    if cur and string.sub(cur, 13, 16) == PTR then  -- a chunk stored under its own key: free it later
      local len, pk = tonumber(string.sub(cur, 17, 26)) or 0, string.sub(cur, 27)  -- 0: a damaged length
      redis.call('ZADD', P .. 'px', now, pk)
      redis.call('ZREM', P .. 'pp', pk)
      redis.call('DECRBY', P .. 'cb', len)
      out[#out + 1] = pk
    end
    if op == 'p' and string.sub(v, 1, 4) == PTR then  -- its own key, leased until made permanent
      if not held then redis.call('ZADD', P .. 'pp', now, string.sub(v, 15)) end
      redis.call('INCRBY', P .. 'cb', tonumber(string.sub(v, 5, 14)))
    end
  end
  if op == 'd' then
    if cur then
      redis.call('HDEL', h, k)
      redis.call('ZREM', P .. 'z:' .. s, k)
    end
  else
    redis.call('HSET', h, k, W12 .. v)
    if not cur then
      redis.call('ZADD', P .. 'z:' .. s, 0, k)
    end
  end
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do  -- chunk keys written leased by earlier commits, made permanent with this one (keep_chunks)
  redis.call('ZADD', P .. 'pp', now, ARGV[i]); i = i + 1
end
trim(P, now - tonumber(ARGV[2]), hz)
if first then redis.call('DEL', P .. 'first') end  -- its turn is over
redis.call('SET', token, W, 'PX', %(token_ms)d)
local due = '(' .. (now - %(settle_ms)d)
out[2] = redis.call('ZCOUNT', P .. 'pp', '-inf', due) + redis.call('ZCOUNT', P .. 'px', '-inf', due)
return out
""".replace("%(settle_ms)d", str(_SETTLE_MS))  # %(token_ms)d: each engine's own (RedisEngine._token_ms)

# A write's claim to go first, given back (RedisEngine._give_back_turn): only by the write that holds it.
_GIVE_BACK_LUA = "#!lua flags=allow-oom\n" + r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# A commit that may need memory is refused before it starts when the server is full; one
# that frees space runs anyway (it moves values rather than adding them).
_WRITE_LUA = "#!lua\n" + _WRITE_BODY
_FREEING_LUA = "#!lua flags=allow-oom\n" + _WRITE_BODY

# Room on a full server (RedisEngine._make_room): every old value kept for readers is dropped,
# _TRIM at a time, whatever its age (hz moves past them all, so a reader whose snapshot needed
# one is told to read again), with the names of the chunk keys (a cluster's) that only those
# old values point to: nothing current names them, so the client deletes them at once.
_ROOM_LUA = "#!lua flags=allow-oom\n" + _TRIM_FN + r"""
local P = string.sub(KEYS[1], 1, -2)
""" + _MOVING + r"""local out = {0}
for _, mem in ipairs(redis.call('ZRANGEBYSCORE', P .. 'gq', '-inf', '+inf', 'LIMIT', 0, %(trim)d)) do
  local rest = string.sub(mem, 13)
  local z = string.find(rest, '\0', 1, true)
  if string.sub(rest, 1, z - 1) == 'chunks' then
    local k = string.sub(rest, z + 1)
    local old = redis.call('HGET', P .. 'g:chunks', k .. '@' .. string.sub(mem, 1, 12))
    if old and string.sub(old, 13, 16) == '\0ptr' then
      local cur = redis.call('HGET', P .. 'h:chunks', k)
      if not cur or string.sub(cur, 13) ~= string.sub(old, 13) then out[#out + 1] = string.sub(old, 27) end
    end
  end
end
out[1] = trim(P, math.huge, num(P .. 'hz'))
return out
""".replace("%(trim)d", str(_TRIM))
#: the most calls of _ROOM_LUA one full server's refusal makes (each drops up to _TRIM old values)
_ROOM_CALLS = 64

_PER_SPACE = ("z:", "h:", "g:", "gl:", "gz:", "gr:")


def _errors() -> tuple[Any, Any, Any]:
    from redis import exceptions as e

    transient = (
        e.ConnectionError, e.TimeoutError, e.BusyLoadingError, e.TryAgainError, e.ClusterDownError,
        e.MovedError, e.AskError, e.ReadOnlyError, e.MasterDownError, e.SlotNotCoveredError,
        e.RedisClusterException,  # no node of a cluster reachable: not a RedisError to redis-py
    )
    return transient, e.OutOfMemoryError, e.RedisError


_ABSENT: Any = object()


class _Expired(BlobpadError):
    """A snapshot older than the old values the server still keeps (a BlobpadError to code
    reading inside the snapshot; a write runs again on one)."""


class RedisEngine:
    """The Redis / Valkey engine (see the module docstring).  Open it with :func:`acquire_redis`."""

    def __init__(self, target: str, client: Any, *, cluster: bool, namespace: str, snapshot_seconds: float,
                 retry_seconds: float, shown: str, wait_replicas: int = 0, wait_timeout: float = 5.0,
                 timeout: float = 10.0, guard_key: str | None = None) -> None:
        self.target = target
        self._shown = shown  # the server as errors name it (no password)
        self._client = client
        self._cluster = cluster
        self.namespace = namespace
        self._prefix = b"bp:{" + namespace.encode() + b"}:"
        # on a cluster each chunk is a key of its own, outside the hash tag: chunks spread over every node
        self._spread = cluster
        self._strike_lock = threading.Lock()
        self._strikes: tuple[list[bytes], list[bytes]] = ([], [])  # settled chunk keys: (made, freed)
        self._chunk_prefix = b"bp:" + namespace.encode() + b":c:"
        self._version_key = self._prefix + b"v"
        self._retain_ms = int(snapshot_seconds * 1000)
        # a freed chunk key outlives every snapshot that may read it: one that read its pointer just before the
        # pointer was trimmed, then waited up to retry_seconds for the chunk's node
        self._free_ms = self._retain_ms + int(retry_seconds * 1000) + _FREE_MARGIN_MS
        self._snapshot_seconds = snapshot_seconds
        self._retry_seconds = retry_seconds
        self._wait_replicas = wait_replicas
        self._wait_ms = int(wait_timeout * 1000)
        # how long one command waits for its reply (the socket's timeout, as acquire_redis sets it)
        self._reply_seconds = max(timeout, wait_timeout + 1 if wait_replicas else 0)
        # shared by the engines of one store in this process (_guard_of), set once the store is known below
        self._guard = TxnGuard()
        self.store = self._guard  # what stands for the store in this process (base.store_of): its pins are shared
        self._run_id = ""
        self._closed = False
        self._transient, self._oom, self._redis_error = _errors()
        self._read_script = client.register_script(_READ_LUA)
        # a commit's token answers "was it applied?" after a lost reply: asked within the socket
        # timeout (wait_timeout's too, for WAIT) plus retry_seconds, so kept twice that, at least a minute
        waited = max(timeout, wait_timeout + 1 if wait_replicas else 0) + retry_seconds
        self._token_ms = max(_TOKEN_MIN_MS, int(2 * waited * 1000))
        ptr = "'\\0ptr'" if cluster else "false"  # on one server chunks are values: none is read as a pointer
        self._write_script = client.register_script(
            _WRITE_LUA.replace("%(token_ms)d", str(self._token_ms)).replace("%(ptr)s", ptr))
        self._freeing_script = client.register_script(
            _FREEING_LUA.replace("%(token_ms)d", str(self._token_ms)).replace("%(ptr)s", ptr))
        self._room_script = client.register_script(_ROOM_LUA)
        self._give_back_script = client.register_script(_GIVE_BACK_LUA)
        self._maxmemory = 0
        self._check_server()
        self._identity = self._claim_identity()
        if guard_key is not None:  # the store itself, however its URL spells it: the server's run, the store's identity
            self._guard = self.store = _guard_of(f"{guard_key}|{self._run_id}|{self._identity.hex()}")
        self._offset = 0.0
        self._offset_at = 0.0
        self._measure_offset()
        if self._spread:
            self._finish()  # what a client killed after its commit left to do
        self.capabilities = Capabilities(
            name="redis-cluster" if cluster else "redis", persistent=True, processes=True, compaction=False,
            size_ceiling=self._maxmemory > 0,
            durability=self._durability(),
        )

    # -- talking to the server ------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], seconds: float | None = None) -> T:
        """Run ``fn``, retrying transient errors with backoff for up to ``seconds`` (``retry_seconds``):
        the last attempt starts at the deadline, so a server back just before it is reached."""
        seconds = self._retry_seconds if seconds is None else seconds
        began = time.monotonic()
        deadline = began + seconds
        delay = 0.02
        while True:
            self._check_open()
            try:
                return fn()
            except self._oom as exc:
                raise StoreFull(
                    f"the Redis server {self._shown} is at its memory limit (maxmemory): {_reason(exc)}",
                    hint=HINT_SERVER_FULL,
                ) from None
            except self._transient as exc:
                if type(exc).__name__ == "AuthenticationError":  # a ConnectionError to redis-py; retrying cannot help
                    raise BlobpadError(
                        f"the Redis server {self._shown} refused the credentials {what}: {_reason(exc)}; check the "
                        "user and password in the URL"
                    ) from None
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        f"the Redis server {self._shown} did not answer {what}: {_tried(began, seconds, self._reply_seconds)} "
                        f"({type(exc).__name__}: {_reason(exc)})"
                    ) from None
            except self._redis_error as exc:
                said = re.search(r"BLOBPAD-DAMAGED (\S+)", str(exc))
                if said is not None:
                    raise CorruptData(
                        f"the store's record {said.group(1)} on the Redis server {self._shown} is damaged (not a "
                        "number); it cannot be read or written until it is put right", hint=HINT_VERIFY,
                    ) from None
                if not _slot_moving(exc):
                    raise BlobpadError(f"the Redis server {self._shown} refused {what}: {_reason(exc)}") from None
                if time.monotonic() >= deadline:  # the store's slot is being moved to another node (resharding)
                    raise Unavailable(
                        f"the Redis server {self._shown} kept refusing {what} while the store's slot moved between "
                        f"nodes: {_tried(began, seconds, self._reply_seconds)} ({_reason(exc)})"
                    ) from None
            delay = self._back_off(delay, deadline)

    def _back_off(self, delay: float, deadline: float) -> float:
        """Wait before the next attempt of :meth:`_call` (never past ``deadline``); return the next delay."""
        time.sleep(max(0.0, min(delay * (0.5 + random.random()), deadline - time.monotonic())))
        # learning the slots again asks a node, which may wait a reply timeout: only while that
        # still ends before the deadline, so no attempt starts long after it (a frozen node cost a
        # call several times retry_seconds)
        if time.monotonic() + self._reply_seconds < deadline:
            self._refresh()
        return min(delay * 2, 1.0)

    def _at_open(self, fn: Callable[[], T]) -> T:
        """:meth:`_call` at open: a server that refuses connections then is more likely a wrong
        address than a failover, so it is said sooner (``_OPEN_SECONDS`` at most).  A service of
        another kind whose answers redis-py fails on in its own way (``+OK`` to everything: an
        AttributeError in its handshake) is a BlobpadError too."""
        try:
            return self._call("at open", fn, min(self._retry_seconds, _OPEN_SECONDS))
        except BlobpadError:
            raise
        except Exception as exc:
            raise _not_redis(self._shown, exc) from None

    def _refresh(self) -> None:
        """On a cluster, learn the slots' primaries again (a failover may have moved the store's)."""
        if self._cluster:
            with contextlib.suppress(Exception):
                self._client.nodes_manager.initialize()

    def _check_server(self) -> None:
        info = self._at_open(lambda: self._client.info("server"))
        if self._cluster and isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
            info = next(iter(info.values()))
        version = str(info.get("redis_version", "0"))
        if not self._cluster:  # this run of the server, whatever the host and port it was reached by
            self._run_id = str(info.get("run_id", ""))
        if tuple(int(p) for p in re.findall(r"\d+", version)[:2]) < (7, 0):
            raise BlobpadError(
                f"the server {self._shown} is Redis {version}: blobpad needs Redis 7.0 or later, or Valkey"
            )
        if not self._cluster:  # a cluster node would answer MOVED for the slots of the other nodes
            cluster = self._at_open(lambda: self._client.info("cluster"))
            if str(cluster.get("cluster_enabled", 0)) == "1":
                raise InvalidArgument(
                    f"the server {self._shown} is a node of a Redis Cluster: open the cluster with "
                    f"{self._shown.split('://', 1)[0]}+cluster://host:port (any of its nodes)"
                )
        if not self._cluster:
            role = self._at_open(lambda: self._client.info("replication"))
            if str(role.get("role", "master")) != "master":
                raise InvalidArgument(
                    f"the server {self._shown} is a replica (role {role.get('role')}): it refuses writes, or keeps "
                    "them from its primary; open the primary instead"
                )
        # INFO, not CONFIG GET: managed servers often disable CONFIG, and INFO states the policy all the same
        if self._cluster:  # every primary holds chunks: each one's policy and limit count
            from redis.cluster import RedisCluster

            memory = self._at_open(lambda: self._client.info("memory", target_nodes=RedisCluster.PRIMARIES))
        else:
            memory = self._at_open(lambda: self._client.info("memory"))
        if self._cluster and memory and all(isinstance(v, dict) for v in memory.values()):
            sections = list(memory.values())
        else:
            sections = [memory]
        for c in sections:
            c = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                 for k, v in c.items()}
            policy = str(c.get("maxmemory_policy", "noeviction"))
            if policy != "noeviction":
                raise InvalidArgument(
                    f"the Redis server {self._shown} has maxmemory-policy {policy}: it would evict parts of "
                    "entries when full; blobpad needs noeviction (CONFIG SET maxmemory-policy noeviction), so that "
                    "a full server refuses puts with StoreFull instead"
                )
            self._maxmemory = max(self._maxmemory, int(c.get("maxmemory", 0) or 0))

    def _durability(self) -> str:
        """What an acknowledged write survives on this server (every primary of a cluster: the
        weakest), as it is configured at open, in words.  ``INFO persistence`` says whether it
        writes an AOF; ``CONFIG GET appendfsync`` how often it flushes it, when CONFIG is allowed
        (managed servers often disable it: then the sentence says what each setting gives)."""
        def sections(answer: Any) -> list[dict[str, Any]]:
            if self._cluster and answer and all(isinstance(v, dict) for v in answer.values()):
                return list(answer.values())
            return [answer]

        if self._cluster:
            from redis.cluster import RedisCluster

            persistence = self._at_open(lambda: self._client.info("persistence", target_nodes=RedisCluster.PRIMARIES))
        else:
            persistence = self._at_open(lambda: self._client.info("persistence"))
        aof = {str(c.get("aof_enabled", 0)) == "1" for c in sections(persistence)}
        fsync: set[str] = set()
        if True in aof:
            try:
                if self._cluster:
                    asked = self._client.config_get("appendfsync", target_nodes=RedisCluster.PRIMARIES)
                else:
                    asked = self._client.config_get("appendfsync")
                fsync = {str(c.get("appendfsync", "?")) for c in sections(asked)}
            except Exception:  # noqa: BLE001 - CONFIG disabled or renamed: say what each setting gives
                fsync = {"?"}
        where = "every primary of this cluster" if self._cluster else "this server"
        some = "some primaries of this cluster" if self._cluster else "this server"
        if False in aof:
            said = (f"{some if True in aof else where} writes no AOF (appendonly no): a killed server or a "
                    "power loss loses every write since its last RDB save, all of them if it saves none")
        elif fsync == {"always"}:
            said = (f"{where} writes an AOF fsynced before every reply (appendonly yes, appendfsync always): an "
                    "acknowledged write survives a killed server and a power loss")
        elif "no" in fsync:
            said = (f"{some} writes an AOF that the operating system flushes when it will (appendfsync no): an "
                    "acknowledged write survives a killed server; a power loss can lose the writes of the last "
                    "seconds")
        elif fsync <= {"always", "everysec"}:
            said = (f"{some} writes an AOF fsynced every second (appendfsync everysec): an acknowledged write "
                    "survives a killed server; a power loss can lose about the last second")
        else:
            said = (f"{where} writes an AOF (appendonly yes; its appendfsync cannot be read, CONFIG is not "
                    "allowed): an acknowledged write survives a killed server; a power loss loses none with "
                    "appendfsync always, about the last second with everysec")
        if self._wait_replicas:
            said += (f"; each commit waits until {self._wait_replicas} replica(s) confirm it (WAIT, wait_replicas), "
                     "so a failover to one of those keeps it; one to a replica that had not confirmed it can lose it")
        else:
            said += "; a failover to a replica can lose acknowledged writes (replication is asynchronous)"
        return said + " (as configured when the store was opened)"

    def _claim_identity(self) -> bytes:
        """The store's identity on the server, made by the first open (``SET NX``): every commit
        checks it, so that a handle whose store was emptied (a restart without persistence,
        ``FLUSHDB``, its keys deleted) or made again since is refused, instead of writing entries
        into a store without its settings, which no later open could read."""
        key = self._prefix + b"id"

        def claim() -> bytes:
            pipe = self._pipeline()
            pipe.set(key, os.urandom(8).hex().encode(), nx=True)
            pipe.get(key)
            return bytes(pipe.execute()[1])

        return self._at_open(claim)

    def clock(self) -> float:
        """Unix time by the server's clock: this host's monotonic clock plus the server's offset
        from it, measured at open and every minute after, so that lifetimes set and checked
        by hosts whose clocks differ agree, and a host whose own clock is set back or
        forward (an NTP step, a resumed VM) keeps the server's time."""
        now = time.monotonic()
        if now - self._offset_at > _CLOCK_SECONDS:
            self._measure_offset()
            now = time.monotonic()
        return now + self._offset

    def _measure_offset(self) -> None:
        """Measure the server's clock against the monotonic clock: the midpoint of one ``TIME``
        round trip (retried as every call is), the shortest of up to :data:`_CLOCK_TRIES`,
        so that a round trip slowed by a stall or a retry does not skew it by half its length."""

        def once() -> tuple[float, float, Any]:
            sent = time.monotonic()
            reply = self._client.time()
            return sent, time.monotonic(), reply

        best: tuple[float, float] | None = None  # (round trip, offset)
        for _ in range(_CLOCK_TRIES):
            sent, got, (seconds, micros) = self._call("TIME", once)
            trip = got - sent
            if best is None or trip < best[0]:
                best = (trip, seconds + micros / 1e6 - (sent + got) / 2)
            if trip <= _CLOCK_GOOD:
                break
        assert best is not None
        self._offset = best[1]
        self._offset_at = time.monotonic()

    def _snapshot_gone(self) -> str:
        return (f"a read of the store {self.target} outlived its snapshot: the old values it needed were dropped, "
                "because it stayed open longer than the writers keep them while they wrote (snapshot_seconds: "
                f"{self._snapshot_seconds:g} s for this handle, as each writer was opened with for its own), or a "
                "full server dropped them to make room; read again")

    def _read_call(self, args: list[Any]) -> list[Any]:
        res = self._call("a read", lambda: self._read_script(keys=[self._version_key], args=args))
        if res[0] == -1:
            raise _Expired(self._snapshot_gone()
            )
        if res[0] == -3:  # the read script's check of the sorted set it was to scan (see _check_order)
            raise CorruptData(
                f"the server's index of the {args[2].decode() if isinstance(args[2], bytes) else args[2]} keyspace "
                "is damaged (a member's score is not 0: its keys come out of order or not at all); gc() puts it "
                "back in order, verify() reports it", hint=HINT_VERIFY,
            )
        return res

    # -- the contract ---------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[RawReadTxn]:
        """A snapshot of the committed state, taken at its first read (or by ``fix_snapshot()``)."""
        self._check_open()
        with self._guard:
            txn = _Txn(self)
            try:
                yield txn
            except _Expired:
                raise BlobpadError(self._snapshot_gone()
                ) from None

    def write(self, fn: Callable[[RawWriteTxn], T], *, frees: bool = False) -> T:
        """Run ``fn`` against a snapshot and commit its writes if nothing it read changed; else run it again."""
        self._check_open()
        with self._guard:
            deadline = time.monotonic() + self._retry_seconds
            delay = 0.001
            attempts = conflicts = 0
            turn = b""  # this write's claim to go first, once it has kept conflicting
            try:
                while True:
                    attempts += 1
                    txn = _Txn(self, writable=True)
                    why = ""
                    try:
                        result = fn(txn)
                    except _Expired:
                        result, status = None, "expired"
                    else:
                        if not txn.writes:
                            return result
                        status, why = self._commit(txn, frees, turn)
                    if status == "ok":
                        turn = b""  # the commit gave it back
                        return result  # type: ignore[return-value]
                    if status == "yield":
                        turn = b""  # a claim of this write ended (its time ran out): another holds the turn now
                    elif status == "conflict":
                        conflicts += 1
                        if conflicts >= _TURN_AFTER and not turn:
                            turn = self._claim_turn(deadline)
                    delay = self._after_refusal(status, why, attempts, deadline, delay)
            finally:
                if turn:
                    self._give_back_turn(turn)

    def _claim_turn(self, deadline: float) -> bytes:
        """Claim the store's turn to go first (``SET NX PX``, for at most :data:`_TURN_MS`): other
        writes' commits yield until this one commits or the claim ends.  A write whose commit kept
        conflicting (a long transaction, such as deleting a notepad that others append to, among
        short ones that each change what it read) would otherwise retry until ``retry_seconds``
        and fail.  b"" when another write holds the turn (this one waits for it) or it cannot be set."""
        ms = max(1, min(_TURN_MS, int((deadline - time.monotonic()) * 1000)))
        token = os.urandom(8).hex().encode()
        try:
            taken = self._call("a claim to go first", lambda: self._client.set(self._prefix + b"first", token, nx=True,
                                                                             px=ms))
        except BlobpadError:
            return b""
        return token if taken else b""

    def _give_back_turn(self, token: bytes) -> None:
        """Give back a claim to go first that no commit of it used (a write that failed or gave up):
        one attempt, as the write is failing already; unanswered, the claim ends by itself within
        :data:`_TURN_MS`."""
        with contextlib.suppress(Exception):
            self._give_back_script(keys=[self._prefix + b"first"], args=[token])

    def _await_turn(self, deadline: float) -> None:
        """Wait, polling every few milliseconds, until no write holds the turn to go first (at most
        :data:`_TURN_MS`, as a claim lasts) or ``deadline`` passes: a write told to yield runs again
        only then, instead of writing its chunks again and again meanwhile."""
        until = min(deadline, time.monotonic() + _TURN_MS / 1000)
        key = self._prefix + b"first"
        while time.monotonic() < until:
            time.sleep(0.002 + 0.006 * random.random())
            try:
                if not self._call("a look at the turn to go first", lambda: self._client.exists(key),
                                  max(0.0, until - time.monotonic())):
                    return
            except BlobpadError:
                return  # the write's own next attempt says what is wrong

    def _after_refusal(self, status: str, why: str, attempts: int, deadline: float, delay: float) -> float:
        """What follows a commit that did not apply (see :meth:`write`): a clear error past ``deadline``,
        else a wait; return the next wait's bound."""
        if status == "gone":
            raise BlobpadError(
                f"the store {self.target} was emptied or made again on the server since this handle "
                "opened it (a restart without persistence, FLUSHDB or FLUSHALL, its keys deleted): nothing "
                "was written; open it again with blobpad.open() (what it held before is gone)"
            )
        if status == "lost":
            self._refresh()
        if time.monotonic() > deadline:
            if status == "lost":  # the server took no commit: not a conflict with other writers
                raise Unavailable(
                    f"the Redis server {self._shown} did not apply a write to the store {self.target}: "
                    f"{attempts} attempts in {self._retry_seconds:g} s, the last refused or unanswered ({why})"
                )
            raise BlobpadError(
                f"a write to the store {self.target} kept conflicting with other writers "
                f"({attempts} attempts in {self._retry_seconds:g} s); try again"
            )
        if status == "yield":  # another write goes first: wait until its turn ends, then run again
            self._await_turn(deadline)
            return delay
        time.sleep(delay * random.random())
        return min(delay * 2, 0.05)

    def _commit(self, txn: _Txn, frees: bool, turn: bytes = b"") -> tuple[str, str]:
        """Send ``txn``'s commit: ("ok", ""), or why it must run again ("conflict", "expired", "yield":
        another write goes first, or "lost": the server went away before it answered, or refused it
        for a while (a replica now: READONLY), and does not hold the commit; then what the server or
        the connection said).  ``turn``: this write's claim to go first, if it holds one."""
        staged = txn.staged_in_use()
        if staged:  # chunks first, each leased: a client killed before its commit leaves only what expires
            sets = [(b"SET", name, (value, b"PX", _LEASE_MS, b"NX")) for name, value in staged.items()]
            try:
                try:
                    self._on_nodes("a write of chunks", sets)
                except StoreFull:  # a full node: once more after freeing what deletes left for readers
                    if not self._make_room():
                        raise
                    self._on_nodes("a write of chunks", sets)
            except BaseException as exc:  # e.g. StoreFull on one node: no commit was sent, nothing names them
                if not isinstance(exc, Unavailable):  # a node that did not answer would not take the drop either:
                    self._drop(staged)                # the keys' leases end them (it doubled a failed put's time)
                raise
        token = os.urandom(12).hex().encode()
        args: list[Any] = [b"" if txn.snap is None else txn.snap, self._retain_ms, token, self._identity,
                           b"1" if txn.held else b"0", turn, len(txn.reads)]
        for space, key in txn.reads:
            args += (space, key)
        scanned = sorted({r for r in txn.scanned if r is not None})
        args.append(len(scanned))
        for bounds in scanned:
            args += bounds
        args.append(len(txn.writes))
        for (space, key), value in txn.writes.items():
            args += (space, key, b"d", b"") if value is None else (space, key, b"p", value)
        kept = [name for name in dict.fromkeys(txn.kept) if name not in staged]
        args.append(len(kept))
        args += kept
        script = self._freeing_script if frees else self._write_script
        try:
            status, res = self._send_trimming(script, args, token)
        except StoreFull:  # a full server refuses a commit before running it: not applied
            self._drop(staged)
            raise
        if status == "ok":
            made = kept if txn.held else list(staged) + kept  # held: leased until the put's last commit keeps them
            if made or len(res) > 2 or (len(res) > 1 and res[1]):
                # after a lost reply res is [version]: the chunks it freed are left to _finish
                self._settle(made, list(res[2:]), bool(len(res) > 1 and res[1]))
        elif status in ("conflict", "expired", "gone", "yield"):  # refused, surely not applied: nothing names them
            self._drop(staged)
        return status, str(res[0]) if status == "lost" and res else ""

    def _send_trimming(self, script: Any, args: list[Any], token: bytes) -> tuple[str, list[Any]]:
        """``_send``, and on StoreFull, once more after :meth:`_make_room` freed what deletes left for readers."""
        try:
            return self._send(script, args, token)
        except StoreFull:
            if not self._make_room():
                raise
            return self._send(script, args, token)

    def _make_room(self) -> bool:
        """On a full server: drop every old value that commits kept for readers' snapshots, whatever its
        age, and delete the chunk keys (a cluster's) that only those named; return whether anything went.

        Deletes and gc() move what they remove aside for ``snapshot_seconds`` (a reader that began
        before them still reads it), so a full server would refuse every put for that long after the
        user deleted entries to make room.  Room comes first: a reader whose snapshot needed one of
        these values is told that its snapshot is gone and to read again (the horizon, ``hz``, moves
        past them), never given other data.  Both steps run where a full server lets them (the
        script frees memory; ``DEL`` never needs any)."""
        dropped = 0
        for _ in range(_ROOM_CALLS):
            res = self._call("the freeing of old values", lambda: self._room_script(keys=[self._version_key]))
            dropped += int(res[0])
            if len(res) > 1:
                with contextlib.suppress(BlobpadError):  # best effort: each also has its lifetime from the delete
                    self._on_nodes("a delete of freed chunks", [(b"DEL", bytes(name), ()) for name in res[1:]])
            if int(res[0]) < _TRIM:
                break
        return dropped > 0

    def _drop(self, staged: dict[bytes, bytes]) -> None:
        """Delete chunk keys written for a commit that surely was not applied (best effort: each has a lease)."""
        if staged:
            with contextlib.suppress(BlobpadError):
                self._on_nodes("a drop of unused chunks", [(b"DEL", name, ()) for name in staged])

    # -- chunks under keys of their own (a cluster) -------------------------------------------

    def _chunk_name(self, key: bytes) -> bytes:
        """A new key for one copy of a chunk: never reused, so freeing one copy never touches a later one."""
        return self._chunk_prefix + key.hex().encode() + b":" + os.urandom(8).hex().encode()

    def _fetch(self, names: list[bytes]) -> list[bytes | None]:
        """The bytes of the chunk keys ``names`` (None where one is gone), in one pipeline over the nodes."""
        def get() -> list[bytes | None]:
            pipe = self._client.pipeline()
            for name in names:
                pipe.get(name)
            return list(pipe.execute())

        return self._call("a read of chunks", get)

    def _on_nodes(self, what: str, ops: list[tuple[bytes, bytes, tuple[Any, ...]]]) -> list[Any]:
        """Run ``ops`` (command, key, arguments; each safe to repeat) on the nodes that hold the keys, one
        pipeline each; with ``wait_replicas`` each pipeline ends in WAIT, so the replicas hold them too.
        Return each op's reply, in the order of ``ops``."""
        def run() -> list[Any]:
            by_node: dict[str, tuple[Any, list[int]]] = {}
            for i, op in enumerate(ops):
                node = self._client.get_node_from_key(op[1])
                by_node.setdefault(node.name, (node, []))[1].append(i)
            replies: list[Any] = [None] * len(ops)
            for node, mine in by_node.values():
                pipe = self._client.get_redis_connection(node).pipeline(transaction=False)
                for i in mine:
                    command, key, rest = ops[i]
                    pipe.execute_command(command, key, *rest)
                if self._wait_replicas:
                    pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms)
                res = pipe.execute()
                if self._wait_replicas:
                    self._check_replicas(res[-1])
                for i, reply in zip(mine, res, strict=False):
                    replies[i] = reply
            return replies

        return self._call(what, run)

    def _settle(self, made: list[bytes], freed: list[bytes], others: bool) -> None:
        """After a commit: make the chunk keys it wrote permanent and let those it freed expire once no
        snapshot can read them, then strike both off the catalog's lists; ``others``: some other client's
        are overdue (it was killed after its commit), so finish a batch of those too."""
        ops = [(b"PERSIST", name, ()) for name in made]
        ops += [(b"PEXPIRE", name, (self._free_ms,)) for name in freed]
        if ops:
            self._on_nodes("the settling of chunks", ops)
            with self._strike_lock:  # struck off the lists with the next commit (or at close): one round less
                self._strikes[0].extend(made)
                self._strikes[1].extend(freed)
        if others:
            self._finish()

    def _take_strikes(self) -> list[tuple[bytes, list[bytes]]]:
        """The settled chunk keys to strike off the catalog's lists, as (list, keys); forgotten once taken:
        a strike lost with a failed commit only makes a later client settle those keys again (harmless)."""
        with self._strike_lock:
            made, freed = self._strikes
            self._strikes = ([], [])
        return [(self._prefix + zset, names) for zset, names in ((b"pp", made), (b"px", freed)) if names]

    def _strike(self) -> None:
        strikes = self._take_strikes()
        if strikes:
            def send() -> None:
                pipe = self._pipeline()
                for zset, names in strikes:
                    pipe.zrem(zset, *names)
                pipe.execute()

            self._call("the settling of chunks", send, min(self._retry_seconds, 2.0))

    def _misplaced(self) -> list[tuple[bytes, list[bytes]]]:
        """The lexically ordered sorted sets (:data:`_LEX_SETS`) holding members whose score is not
        0 (damage: ``ZRANGEBYLEX`` is then undefined), with those members."""
        names = [self._prefix + kind + space.encode() for space in SPACES for kind in _LEX_SETS]

        def find() -> list[tuple[bytes, list[bytes]]]:
            pipe = self._pipeline()
            for name in names:
                pipe.zrangebyscore(name, "-inf", "(0")
                pipe.zrangebyscore(name, "(0", "+inf")
            found = pipe.execute()
            return [(name, found[2 * i] + found[2 * i + 1]) for i, name in enumerate(names)
                    if found[2 * i] or found[2 * i + 1]]

        return self._call("a check of the keyspaces' indexes", find)

    def salvage(self, raw: RawReadTxn) -> tuple[RawReadTxn, list[str]]:
        """verify()'s check of what the catalog's values do not show: every keyspace's sorted sets
        hold their members at score 0 (:meth:`_misplaced`)."""
        problems = [
            f"the server's index {name[len(self._prefix):].decode('ascii', 'replace')} holds {len(members)} "
            "key(s) out of order (a score other than 0): listings may miss keys or show others; gc() puts "
            "them back in order"
            for name, members in self._misplaced()
        ]
        return raw, problems

    def mend(self) -> int:
        """Put the members of the keyspaces' sorted sets found at a score other than 0 back at 0
        (:meth:`_misplaced`: damage, which makes scans CorruptData); return how many.  ``gc()``
        calls it first, so that its own scans see the keys in order again."""
        mended = 0
        for name, members in self._misplaced():  # XX: a member a write removed since stays removed
            self._call("an index put back in order",
                       lambda n=name, m=members: self._client.zadd(n, dict.fromkeys(m, 0), xx=True, ch=True))
            mended += len(members)
        return mended

    def collect(self) -> int:
        """Let expire (in ``_LEASE_MS``) the chunk keys of a cluster store that are permanent but named by
        no pointer (the race in the module docstring); return how many.  ``gc()`` calls it.

        The keys are listed first and the pointers read after, from a new snapshot: a key made permanent
        before the listing was committed before it, so its pointer is in that snapshot unless freed."""
        if not self._spread:
            return 0

        def permanent() -> list[bytes]:
            # this store's chunk keys only: <prefix><chunk hex>:<copy hex>; another namespace can start with
            # this one's prefix ("a:c" beside "a": bp:a:c:c:...), so the rest must be exactly that shape
            found = self._client.scan_iter(match=self._chunk_prefix + b"*", count=1000)
            keys = [k for k in found if _CHUNK_KEY_TAIL.fullmatch(k[len(self._chunk_prefix):])]
            pipe = self._client.pipeline()
            for key in keys:
                pipe.pttl(key)
            return [k for k, ttl in zip(keys, pipe.execute(), strict=True) if ttl == -1]

        keys = self._call("a listing of chunk keys", permanent)
        if not keys:
            return 0
        with self.read() as txn:
            named = {_pointed(v) for _, v in txn._scan_committed("chunks", b"", None, False)}
        loose = [k for k in keys if k not in named]
        if not loose:
            return 0
        # NX: a key that has an expiry by now keeps it (one a delete freed since the listing, whose
        # pointer the snapshot no longer holds, expires when the delete said, not a day later)
        replies = self._on_nodes("the expiry of loose chunks", [(b"PEXPIRE", k, (_LEASE_MS, b"NX")) for k in loose])
        return sum(1 for reply in replies if reply == 1)

    def _finish(self) -> None:
        """Settle a batch of the chunk keys that commits older than ``_SETTLE_MS`` left unsettled."""
        due = int(self.clock() * 1000) - _SETTLE_MS

        def overdue() -> tuple[list[bytes], list[bytes]]:
            pipe = self._pipeline()
            pipe.zrangebyscore(self._prefix + b"pp", "-inf", due, start=0, num=_BATCH)
            pipe.zrangebyscore(self._prefix + b"px", "-inf", due, start=0, num=_BATCH)
            made, freed = pipe.execute()
            return list(made), list(freed)

        made, freed = self._call("a look for unsettled chunks", overdue)
        if made or freed:
            self._settle(made, freed, False)

    def _send(self, script: Any, args: list[Any], token: bytes) -> tuple[str, list[Any]]:
        self._check_open()
        try:
            strikes = self._take_strikes()
            if self._wait_replicas or strikes:
                pipe = self._pipeline()
                for zset, names in strikes:  # earlier commits' settled chunks, struck off on the way
                    pipe.zrem(zset, *names)
                script(keys=[self._version_key], args=args, client=pipe)
                if self._wait_replicas:
                    pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms)
                res, *acked = pipe.execute()[len(strikes):]
                if self._wait_replicas:
                    self._check_replicas(acked[0])
            else:
                res = script(keys=[self._version_key], args=args)
        except self._oom as exc:
            raise StoreFull(f"the Redis server {self._shown} is at its memory limit (maxmemory): {_reason(exc)}",
                            hint=HINT_SERVER_FULL) from None
        except self._transient as exc:
            # no answer: whether the commit was applied is on the server, under its token
            tok = self._prefix + b"tok:" + token
            if not self._call("a commit's outcome", lambda: self._client.exists(tok)):
                return "lost", [f"{type(exc).__name__}: {_reason(exc)}"]
            if self._wait_replicas:  # a write on one connection, then WAIT: the replicas have the commit too
                def confirm() -> int:
                    pipe = self._pipeline()
                    pipe.pexpire(tok, self._token_ms)
                    pipe.execute_command("WAIT", self._wait_replicas, self._wait_ms)
                    return int(pipe.execute()[1])

                self._check_replicas(self._call("WAIT", confirm))
            return "ok", [0]
        except self._redis_error as exc:
            if _slot_moving(exc):  # refused before it wrote anything (the script's first command): run it again
                return "lost", [f"the store's slot is being moved to another node: {_reason(exc)}"]
            raise BlobpadError(f"the Redis server {self._shown} refused a commit: {_reason(exc)}") from None
        if res[0] > 0:
            return "ok", list(res)
        return (res[1].decode() if isinstance(res[1], bytes) else str(res[1])), []

    def _pipeline(self) -> Any:
        """A pipeline on one connection to the node holding the store (WAIT counts that connection's writes)."""
        if not self._cluster:
            return self._client.pipeline(transaction=False)
        node = self._client.get_node_from_key(self._version_key)
        return self._client.get_redis_connection(node).pipeline(transaction=False)

    def _check_replicas(self, acked: Any) -> None:
        if int(acked) < self._wait_replicas:
            raise BlobpadError(
                f"the Redis server {self._shown} applied the write, but only {int(acked)} of the "
                f"{self._wait_replicas} replicas asked for confirmed it within {self._wait_ms / 1000:g} s: "
                "a failover now could lose it"
            )

    def size(self) -> int:
        """The bytes the server reports for this store's keys (``MEMORY USAGE``)."""
        keys = [self._prefix + k for k in (b"v", b"hz", b"gq", b"pp", b"px", b"id")]
        keys += [self._prefix + part.encode() + space.encode() for space in SPACES for part in _PER_SPACE]

        def usage() -> int:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.memory_usage(key, samples=0)
            pipe.get(self._prefix + b"cb")  # the bytes of the chunks under keys of their own
            *used, chunks = pipe.execute()
            return sum(int(n or 0) for n in used) + int(chunks or 0)

        return self._call("MEMORY USAGE", usage)

    def map_size(self) -> int:
        """The server's ``maxmemory`` (0: no limit)."""
        return self._maxmemory

    def compact(self) -> tuple[int, int]:
        raise BlobpadError("the Redis engine has nothing to compact (capabilities.compaction is False): "
                           "the server frees memory itself")

    def _check_open(self) -> None:
        if self._closed:
            raise BlobpadError(f"the store {self.target} is closed")

    def close(self) -> None:
        """Close this holder's connections (idempotent); the data stays on the server."""
        if self._closed:
            return
        with contextlib.suppress(BlobpadError):  # left on the lists, they are settled again later: harmless
            self._strike()
        self._closed = True
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection must not fail a close
            pass


class _Txn:
    """A read or write transaction: reads at one snapshot; a write's changes kept aside."""

    __slots__ = ("_e", "snap", "writes", "reads", "scanned", "_writable", "_seen", "staged", "_bodies", "held", "kept")

    def __init__(self, engine: RedisEngine, writable: bool = False) -> None:
        self._e = engine
        self.snap: int | None = None
        self._writable = writable
        self.writes: dict[tuple[str, bytes], bytes | None] = {}
        self.reads: set[tuple[str, bytes]] = set()
        #: the ranges a write's scans observed (ZRANGEBYLEX bounds; None: a scan that yielded nothing yet)
        self.scanned: list[tuple[str, bytes, bytes] | None] = []
        self._seen: dict[tuple[str, bytes], bytes | None] = {}  # committed values read (fixed at the snapshot)
        self.staged: dict[bytes, bytes] = {}  # a write's chunks under keys of their own: key -> bytes
        self._bodies: dict[bytes, bytes | None] = {}  # chunk keys' bytes fetched ahead (see prefetch_pairs)
        self.held = False  # the chunks this write stages stay leased after its commit (hold_chunks)
        self.kept: list[bytes] = []  # chunk keys this commit makes permanent besides its own (keep_chunks)

    def hold_chunks(self) -> None:
        """Leave the chunk keys this write stages leased (``_LEASE_MS``) after its commit, instead of
        making them permanent: a batch of a put still in progress, whose last commit keeps them
        (:meth:`keep_chunks`).  A client killed in between leaves chunks that all expire by
        themselves, whatever its pending-put journal holds, until a rollback frees them sooner."""
        if not self._writable:
            raise BlobpadError("internal error: hold_chunks in a read transaction")
        self.held = True

    def keep_chunks(self, keys: list[bytes]) -> None:
        """Make the chunk keys the catalog's chunk records ``keys`` point to permanent with this commit
        (an entry's last commit: its earlier batches' chunks were held leased, and a chunk it shares
        may be one another put in progress holds)."""
        if not self._writable:
            raise BlobpadError("internal error: keep_chunks in a read transaction")
        if not self._e._spread or not keys:
            return
        for value in self.get_many("chunks", list(dict.fromkeys(bytes(k) for k in keys)), resolve=False):
            name = _pointed(value)
            if name is not None and name not in self.staged:
                self.kept.append(name)

    def staged_in_use(self) -> dict[bytes, bytes]:
        """The staged chunks the writes still name (a chunk put, then deleted or put again, is not)."""
        named = {_pointed(v) for (space, _), v in self.writes.items() if space == "chunks"}
        return {name: value for name, value in self.staged.items() if name in named}

    def _resolve(self, values: list[bytes | None], keep: bool) -> list[bytes | None]:
        """Chunk values as the catalog holds them, each pointer to a chunk key replaced by that key's bytes
        (None if the key is gone: a chunk lost); a reader (``keep`` false) holds them only until read."""
        out = list(values)
        missing: list[tuple[int, bytes]] = []
        for j, v in enumerate(values):
            name = _pointed(v)
            if name is None:
                continue
            if name in self.staged:
                out[j] = self.staged[name]
            elif name in self._bodies:
                out[j] = self._bodies[name] if keep else self._bodies.pop(name)
            else:
                missing.append((j, name))
        if missing:
            for (j, _), body in zip(missing, self._e._fetch([name for _, name in missing]), strict=True):
                out[j] = body
        return out

    def fix_snapshot(self) -> None:
        """Fix the snapshot now (one script call) if no read fixed it yet: :meth:`Checked.pinned`
        calls it, so that a pinned snapshot is the state when its block began, not at its first read."""
        if self.snap is None:
            self.snap = self._e._read_call([b"", b"get"])[0]

    def prefetch_pairs(self, pairs: list[tuple[str, bytes]], *, bodies: bool = True) -> None:
        """Fetch the committed values of ``(keyspace, key)`` pairs at this snapshot that are not held yet, in
        one script call per ``_BATCH`` of them; the reads that follow take them from here."""
        missing = [p for p in dict.fromkeys((space, bytes(k)) for space, k in pairs) if p not in self._seen]
        for i in range(0, len(missing), _BATCH):
            part = missing[i:i + _BATCH]
            args: list[Any] = [b"" if self.snap is None else self.snap, b"get"]
            for space, k in part:
                args += (space, k)
            res = self._e._read_call(args)
            self.snap = res[0]
            for pair, value in zip(part, res[1:], strict=True):
                self._seen[pair] = value
                if self._writable:
                    self.reads.add(pair)
            if bodies and self._e._spread:  # and the bytes of the chunks they point to, in one more round
                pointed = (_pointed(v) for (space, _), v in zip(part, res[1:], strict=True) if space == "chunks")
                names = [n for n in dict.fromkeys(pointed) if n is not None and n not in self._bodies
                         and n not in self.staged]
                if names:
                    self._bodies.update(zip(names, self._e._fetch(names), strict=True))

    def get(self, space: str, key: bytes) -> bytes | None:
        return self.get_many(space, [key])[0]

    def get_many(self, space: str, keys: list[bytes], *, resolve: bool = True) -> list[bytes | None]:
        """The values of ``keys`` (a write's own first), fetched in as few requests as can be; ``resolve``
        false leaves a chunk stored under its own key as the catalog's pointer to it."""
        keys = [bytes(k) for k in keys]
        spread = resolve and self._e._spread and space == "chunks"
        if self._writable:
            mine = [self.writes.get((space, k), _ABSENT) for k in keys]
            self.prefetch_pairs([(space, k) for k, m in zip(keys, mine, strict=True) if m is _ABSENT], bodies=resolve)
            values = [self._seen[(space, k)] if m is _ABSENT else m for k, m in zip(keys, mine, strict=True)]
            return self._resolve(values, True) if spread else values
        self.prefetch_pairs([(space, k) for k in keys], bodies=resolve)
        values = [self._seen[(space, k)] for k in keys]
        for k, v in zip(keys, values, strict=True):  # a reader holds a value only until it is read: what it
            if v is not None:  # fetched ahead, not all it read; an absence costs nothing to keep, and is asked again
                self._seen.pop((space, k), None)  # (an entry without filters: whether it has any, then which)
        return self._resolve(values, False) if spread else values

    def count(self, space: str) -> int | None:
        return None

    def scan(self, space: str, start: bytes, stop: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        if self._writable:
            pairs = self._observed(space, start, stop, reverse, self._scan_mine(space, start, stop, reverse))
        else:
            pairs = self._scan_committed(space, start, stop, reverse)
        if not (self._e._spread and space == "chunks"):
            yield from pairs
            return
        while batch := list(itertools.islice(pairs, _BATCH)):  # the chunks' bytes, a batch of keys at a time
            values = self._resolve([v for _, v in batch], self._writable)
            # a chunk key gone (lost) reads as an empty value: damage, to the checks above the engine
            yield from ((k, b"" if v is None else v) for (k, _), v in zip(batch, values, strict=True))

    def _observed(self, space: str, start: bytes, stop: bytes | None, reverse: bool,
                  pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """``pairs``, a write's scan, recording in ``scanned`` the range it has observed so far: up to
        and including the last key yielded, or the whole range once it ran out.  The commit checks
        that range only: a scan stopped after its first keys (an eviction, a sweep, a batch of a
        delete) conflicts with a change among those keys or before them, not with every later one."""
        lo = b"[" + start if start else b"-"
        hi = b"(" + stop if stop is not None else b"+"
        slot = len(self.scanned)
        self.scanned.append(None)
        for key, value in pairs:
            self.scanned[slot] = (space, b"[" + key, hi) if reverse else (space, lo, b"[" + key)
            yield key, value
        self.scanned[slot] = (space, lo, hi)

    def _scan_committed(self, space: str, start: bytes, stop: bytes | None,
                        reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        lo = b"[" + start if start else b"-"
        hi = b"(" + stop if stop is not None else b"+"
        if stop is not None and stop <= start:
            return
        page = _FIRST_PAGE  # most scans that stop early want one key or a few: the pages grow from few
        while True:
            res = self._e._read_call([b"" if self.snap is None else self.snap, b"scan", space, lo, hi,
                                      b"1" if reverse else b"0", page])
            self.snap = res[0]
            na, nb = res[1], res[2]
            flat = res[3:]
            found: dict[bytes, bytes | None] = {}
            for j in range(0, 2 * (na + nb), 2):
                found[flat[j]] = flat[j + 1]
            a_keys = [flat[j] for j in range(0, 2 * na, 2)]
            _check_order(space, a_keys, lo, hi, reverse)
            # the page is full when the live keys filled it; the keys changed since the snapshot
            # came with it up to its last key (or all of them in the range)
            bound = a_keys[-1] if len(a_keys) == page else None
            keys = sorted(found, reverse=reverse)
            if bound is not None:
                keys = [k for k in keys if (k >= bound if reverse else k <= bound)]
            for k in keys:
                value = found[k]
                if value is not None:
                    if self._writable:
                        self.reads.add((space, k))
                    yield k, value
            if bound is None:
                return
            if reverse:
                hi = b"(" + bound
            else:
                lo = b"(" + bound
            page = min(4 * page, _BATCH)

    def _scan_mine(self, space: str, start: bytes, stop: bytes | None,
                   reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        mine = sorted((k for (s, k) in self.writes if s == space and start <= k and (stop is None or k < stop)),
                      reverse=reverse)
        committed = self._scan_committed(space, start, stop, reverse)
        pending = next(committed, None)
        i = 0
        while pending is not None or i < len(mine):
            if pending is None or (i < len(mine) and ((mine[i] > pending[0]) if reverse else (mine[i] < pending[0]))):
                key = mine[i]
                i += 1
                value = self.writes[(space, key)]
                if value is not None:
                    yield key, value
                continue
            key, value = pending
            pending = next(committed, None)
            if i < len(mine) and mine[i] == key:
                i += 1
                value = self.writes[(space, key)]  # type: ignore[assignment]
                if value is None:
                    continue
            elif (space, key) in self.writes:  # written after the scan's order passed it: its new value
                value = self.writes[(space, key)]  # type: ignore[assignment]
                if value is None:
                    continue
            yield key, value

    def put(self, space: str, key: bytes, stored: bytes) -> None:
        if not self._writable:
            raise BlobpadError("internal error: a put in a read transaction")
        if space not in SPACES or not isinstance(stored, bytes) or not 0 < len(key) <= MAX_KEY:
            raise BlobpadError(f"internal error: a bad put in the {space!r} keyspace")
        if self._e._spread and space == "chunks":  # its bytes under a key of its own, written before the commit
            name = self._e._chunk_name(bytes(key))
            self.staged[name] = stored
            stored = _pointer(name, len(stored))
        self.writes[(space, bytes(key))] = stored

    def delete(self, space: str, key: bytes) -> bool:
        if not self._writable:
            raise BlobpadError("internal error: a delete in a read transaction")
        existed = self.get_many(space, [key], resolve=False)[0] is not None
        self.writes[(space, bytes(key))] = None
        return existed


# -- opening --------------------------------------------------------------------------------

_LOCK = threading.Lock()


#: what a script's command answers, inside the script, where a command outside one would be
#: redirected or told to try again (ASK, TRYAGAIN: a slot being moved; CLUSTERDOWN)
_SCRIPT_REDIRECTS = ("ttempted to access a non local key", "while the cluster is down")  # Redis: "Script a...", Valkey: "A..."


def _above(key: bytes, lo: bytes) -> bool:
    """``key`` is at or past the lower bound ``lo`` of ``ZRANGEBYLEX`` (``-``, ``[k`` or ``(k``)."""
    return lo == b"-" or (key >= lo[1:] if lo[:1] == b"[" else key > lo[1:])


def _below(key: bytes, hi: bytes) -> bool:
    """``key`` is at or before the upper bound ``hi`` of ``ZRANGEBYLEX`` (``+``, ``[k`` or ``(k``)."""
    return hi == b"+" or (key <= hi[1:] if hi[:1] == b"[" else key < hi[1:])


def _check_order(space: str, keys: list[bytes], lo: bytes, hi: bytes, reverse: bool) -> None:
    """The keys ``ZRANGEBYLEX`` (or ``ZREVRANGEBYLEX``) gave for ``lo``..``hi``: inside it, in
    order, or the keyspace's sorted set is damaged (a member whose score is not 0: what the
    server answers is then undefined, and was another session's keys).  CorruptData."""
    ordered = all(a > b if reverse else a < b for a, b in itertools.pairwise(keys))
    if not ordered or not all(_above(k, lo) and _below(k, hi) for k in (keys[:1] + keys[-1:])):
        raise CorruptData(
            f"the server's index of the {space} keyspace is damaged (its keys come out of order: a member's "
            "score is not 0); gc() puts it back in order, verify() reports it", hint=HINT_VERIFY,
        )


#: the sorted sets of each keyspace whose members all score 0 (ordered by ZRANGEBYLEX): the live
#: keys, and the keys with old values kept for snapshots
_LEX_SETS = (b"z:", b"gz:")


def _slot_moving(exc: BaseException) -> bool:
    """Whether ``exc`` is a script refused because the store's slot is moving between nodes, or the
    cluster is down: the script stopped at its first command (see the probe in ``_RESOLVE``), so
    running it again once the slot has settled is safe."""
    text = str(exc)
    return any(said in text for said in _SCRIPT_REDIRECTS)


def _tls_hint(said: str, tls: bool) -> str:
    """What to add to an error at open that a TLS mismatch explains: a client speaking TLS to a
    server that does not waits for a handshake that never comes (a timeout); one speaking plain
    to a TLS server has its connection closed."""
    if tls and "Timeout" in said:
        return ("; the URL asks for TLS (rediss://, valkeys://): if the server does not speak TLS, use redis:// "
                "(or valkey://)")
    if not tls and ("closed by server" in said or "Connection reset" in said):
        return ("; the URL asks for no TLS (redis://, valkey://): if the server speaks only TLS, use rediss:// "
                "(or valkeys://)")
    return ""


def _reason(exc: BaseException) -> str:
    """What the server said, as an error message may quote it: without redis-py's account of
    the pipeline command it came from (which holds the command's arguments: compressed chunk
    bytes, values of the store), without a password, printable and at most 300 characters."""
    text = str(exc)
    said = re.search(r"of pipeline caused error: (.*)", text, re.S)
    if said is not None:
        text = said.group(1)
    text = without_password(text)
    text = one_line(text)
    return text if len(text) <= 300 else text[:299] + "…"


def _not_redis(shown: str, exc: BaseException) -> BlobpadError:
    """The error of a server whose answers at open are not Redis's (redis-py failed on them with ``exc``)."""
    return BlobpadError(f"the server at {shown} did not answer as Redis or Valkey do at open ({type(exc).__name__}: "
                        f"{_reason(exc)}); check that the URL names a Redis or Valkey server")


def _tried(began: float, seconds: float, timeout: float) -> str:
    """How long a call was retried, as an error says it: the time it took, and both of its bounds
    (new attempts begin for up to ``seconds``; each waits up to the socket ``timeout`` for its reply)."""
    return (f"tried for {time.monotonic() - began:.1f} s (new attempts for up to {seconds:g} s, each waiting up to "
            f"{timeout:g} s for a reply)")


def _connect_cluster(base: str, common: dict[str, Any], shown: str, seconds: float) -> Any:
    """A RedisCluster client of ``base`` (it asks a node for the cluster's slots at once),
    retried with backoff for ``seconds``: Unavailable when no node answers by then,
    InvalidArgument for a server that is not in cluster mode, BlobpadError for refused
    credentials (retrying cannot help either)."""
    from redis import exceptions as e
    from redis.cluster import RedisCluster

    began = time.monotonic()
    deadline = began + seconds
    delay = 0.02
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    while True:
        try:
            # no retries of its own (3 by default, each up to the socket timeout, after a refresh of the
            # slots that may wait as long on a frozen node): every call's retries are _call's, bounded by
            # retry_seconds, so a frozen node costs a call about that long, not several times it
            return RedisCluster.from_url(base, retry=Retry(NoBackoff(), 0), **common)
        except e.AuthenticationError as exc:
            raise BlobpadError(f"the Redis Cluster at {shown} refused the credentials at open: {exc}; check the "
                               "user and password in the URL") from None
        except (e.RedisClusterException, e.ConnectionError, e.TimeoutError) as exc:
            said = without_password(str(exc))
            if "cluster mode is not enabled" in said.lower() or "cluster support disabled" in said.lower():
                raise InvalidArgument(f"the server at {shown} is not a Redis Cluster (cluster mode is off): open it "
                                      "with redis:// instead of redis+cluster://") from None
            if any(word in said for word in ("WRONGPASS", "NOAUTH", "invalid password", "Authentication")):
                raise BlobpadError(f"the Redis Cluster at {shown} refused the credentials at open: {said}; check the "
                                   "user and password in the URL") from None
            if time.monotonic() + delay > deadline:
                raise Unavailable(f"the Redis Cluster at {shown} did not answer at open: "
                                  f"{_tried(began, seconds, common['socket_timeout'])} "
                                  f"({type(exc).__name__}: {said})") from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)
        except BlobpadError:
            raise
        except Exception as exc:  # redis-py failing in its own way on answers no Redis gives
            raise _not_redis(shown, exc) from None


#: the transaction guard of each store open in this process, by the store itself (its kind, database and
#: namespace, the server's run, the store's identity on the server: never by how its URL spells the host
#: or the database): engines opened on one store share it, so a transaction opened inside another of the
#: same store is refused on Redis as on the local engines, whose handles share one engine, and a snapshot
#: pinned through one handle is read through every other
_GUARDS: weakref.WeakValueDictionary[str, TxnGuard] = weakref.WeakValueDictionary()
_GUARDS_LOCK = threading.Lock()


def _guard_of(target: str) -> TxnGuard:
    """The transaction guard every engine of the store ``target`` (see :data:`_GUARDS`) shares in this process."""
    with _GUARDS_LOCK:
        guard = _GUARDS.get(target)
        if guard is None:
            guard = _GUARDS[target] = TxnGuard()
        return guard


def acquire_redis(target: str, **options: Any) -> RedisEngine:
    """The engine of a ``redis://`` / ``redis+cluster://`` target (see the module docstring).

    Raises InvalidArgument for a malformed URL or option, BlobpadError when the server
    cannot be reached within ``retry_seconds`` or is older than Redis 7.
    """
    try:
        import redis
    except ImportError:  # pragma: no cover - redis is a dependency
        raise BlobpadError("the Redis engine needs the redis package: pip install redis") from None
    said = shown_target(target)  # the target as errors quote it: never its password, never all of a long one
    if any(c in target for c in "# \t\r\n"):  # in a password, those must be percent-encoded
        raise InvalidArgument(  # not quoted: where the password ends is what cannot be told
            f"the {target.partition('://')[0][:20]!r} URL given is not a valid Redis URL: it holds a '#' or white "
            "space; in a password or user name write them percent-encoded ('#' is %23, a space %20)"
        )
    try:
        parts = urlsplit(target)
    except ValueError as exc:  # a malformed IPv6 host, mostly
        raise InvalidArgument(f"{said} is not a valid Redis URL: {exc}") from None
    if "@" in parts.path or "@" in parts.query:  # a user name or password holding '/' or '?' cut the URL there
        raise InvalidArgument(  # not quoted either: the query or path would be the password's end
            f"the {target.partition('://')[0][:20]!r} URL given is not a valid Redis URL: an '@' follows a '/' or "
            "'?'; in a password or user name write them percent-encoded ('/' is %2F, '?' %3F, '@' %40)"
        )
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgument(f"{said} is not a Redis URL (redis://host:port/db or redis+cluster://host:port)")
    cluster = SCHEMES[scheme]
    settings = dict(REDIS_OPTIONS)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given: dict[str, Any] = {}
    for name, value in [*query, *options.items()]:
        if name not in REDIS_OPTIONS:
            from .lmdb import LMDB_OPTIONS

            where = "an option of the LMDB engine" if name in LMDB_OPTIONS else "not an option"
            raise InvalidArgument(
                f"{str(name)[:80]} is {where}; the Redis engine takes {', '.join(sorted(REDIS_OPTIONS))} "
                "(in the URL's query string or as keyword arguments)"
            )
        if name in given:
            raise InvalidArgument(f"{name} is given twice (in the URL's query string or as a keyword argument): "
                                  "give it once")
        given[name] = value
    for name, value in given.items():
        if name == "namespace":
            if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
                raise InvalidArgument(
                    f"namespace must be 1 to 64 letters, digits or ._:- characters, not {str(value)[:80]!r}"
                )
            settings[name] = value
        elif name == "wait_replicas":
            try:
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    raise TypeError
                count = int(value)
            except (TypeError, ValueError):
                raise InvalidArgument(f"wait_replicas must be a whole number, not {str(value)[:80]!r}") from None
            if not 0 <= count <= 16:
                raise InvalidArgument(f"wait_replicas must be from 0 to 16, not {count}")
            settings[name] = count
        else:
            try:
                if isinstance(value, bool):
                    raise TypeError
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                raise InvalidArgument(f"{name} must be a number of seconds, not {str(value)[:80]!r}") from None
            if not 0 < number <= 86_400 * 7:
                raise InvalidArgument(f"{name} must be more than 0 and at most a week in seconds, not {str(value)[:80]}")
            settings[name] = number
    host = parts.hostname or "localhost"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port is None:
        port = 6379
    elif not 1 <= port <= 65535:
        raise InvalidArgument(f"{said}: the port is not a number from 1 to 65535")
    path = parts.path.strip("/")
    if cluster and path not in ("", "0"):
        raise InvalidArgument(f"{said}: a Redis Cluster has only database 0")
    if path and not (path.isascii() and path.isdigit() and len(path) <= 5):
        raise InvalidArgument(f"{said}: the database is a number, as in redis://host:6379/0")
    tls = scheme.split("+")[0] in ("rediss", "valkeys")
    netloc = parts.netloc
    if not parts.hostname:  # redis:///0, redis://:6380/0: the host left out is localhost, as errors say
        userinfo, at, port_part = netloc.rpartition("@")
        netloc = userinfo + at + "localhost" + port_part
    base = urlunsplit(("rediss" if tls else "redis", netloc, "/" + (path or "0"), "", ""))
    shown_netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 address in brackets, as in URLs
    # the store as errors name it: the scheme the caller wrote (a cluster's, without a database)
    shown = f"{scheme}://{shown_netloc}" + ("" if cluster else f"/{path or '0'}")
    engine_target = urlunsplit((scheme, shown_netloc, "/" + (path or "0") if not cluster else "",
                               f"namespace={settings['namespace']}", ""))
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # WAIT holds its reply up to wait_timeout: the socket must wait longer than that
    read_timeout = max(settings["timeout"], settings["wait_timeout"] + 1 if settings["wait_replicas"] else 0)
    common: dict[str, Any] = {
        "socket_timeout": read_timeout, "socket_connect_timeout": settings["timeout"],
        "decode_responses": False,
    }
    try:
        if cluster:
            try:
                client = _connect_cluster(base, common, f"{scheme}://{shown_netloc}",
                                          min(settings["retry_seconds"], _OPEN_SECONDS))
            except Unavailable as exc:
                raise Unavailable(str(exc) + _tls_hint(str(exc), tls)) from None
        else:
            client = redis.Redis.from_url(base, retry=Retry(NoBackoff(), 0), **common)
    except redis.RedisError as exc:
        raise BlobpadError(f"cannot reach the Redis server {shown}: {without_password(str(exc))}") from None
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(f"{said} is not a valid Redis URL: {without_password(str(exc))}") from None
    try:
        return RedisEngine(
            engine_target, client, cluster=cluster, namespace=settings["namespace"],
            snapshot_seconds=settings["snapshot_seconds"], retry_seconds=settings["retry_seconds"], shown=shown,
            wait_replicas=settings["wait_replicas"], wait_timeout=settings["wait_timeout"], timeout=settings["timeout"],
            guard_key=f"{'cluster' if cluster else 'server'}/{int(path or 0)}/{settings['namespace']}",
        )
    except Unavailable as exc:
        client.close()
        raise Unavailable(str(exc) + _tls_hint(str(exc), tls)) from None
    except BaseException:
        client.close()
        raise
