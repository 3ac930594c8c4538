"""Fetch sessions (KIP-227): a consumer of many partitions sends only what changed.

A Fetch (v7+) carries ``session_id`` and ``session_epoch``:

=========== ========= ==========================================================
session id  epoch     meaning
=========== ========= ==========================================================
0           -1        a full fetch without a session (what clients before KIP-227
                      and those without sessions send)
0 or ID     0         a full fetch that (closes session ID and) opens a session:
                      the response carries the new id, or 0 when the cache has
                      no room
ID          -1        close session ID; this fetch is full and sessionless
ID          N > 0     an incremental fetch: the partitions listed are added or
                      updated, ``forgotten_topics_data`` are removed, and every
                      other partition of the session is fetched as cached
=========== ========= ==========================================================

An incremental response holds only the partitions that changed since the
session last answered (as Kafka's ``CachedPartition.maybeUpdateResponseData``):
new records, a changed high watermark or log start offset, or an error. A
partition that returned records moves to the end of the session's order, so a
``max_bytes`` cut does not starve the others. An unknown session id answers
FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH, a session
opened with topic names used with topic ids (or the reverse)
FETCH_SESSION_TOPIC_ID_ERROR; each with session id 0 and no partitions.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions
(Kafka's default 1000). When full, a new session may evict, as Kafka's
``FetchSessionCacheShard.tryEvict``: the least recently used session if it was
idle for more than ``EVICTION_MS`` (120 s, Kafka's constant); else the
least valuable evictable session, ranked (privileged, size, id), if it ranks
below the new one. A session younger than ``EVICTION_MS`` is only evictable by a
privileged (follower) session, and only if it is not privileged itself.

The partitions all sessions cache are bounded too, by
``fetch.session.cache.max.partitions`` (an Odradek setting; Kafka bounds only the
session count, but each cached partition costs some 400 bytes of Python, and one
client could otherwise grow a single session by millions of made-up partitions,
an incremental fetch at a time). A new session that does not fit evicts by the
rules above until it does, or is not opened; an incremental fetch that would
grow its session past the bound closes it and is answered without a session
(session id 0, as when a session's last partition is forgotten), so the client
goes back to a full fetch.

Pure bookkeeping: the caller passes the clock (milliseconds, monotonic) and the
handler (``broker/apis/fetch.py``) does the reading.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_MAX_PARTITIONS",
    "EVICTION_MS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "SessionError",
    "next_epoch",
]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
DEFAULT_MAX_PARTITIONS = 1_000_000  # fetch.session.cache.max.partitions: ~400 MB at most


PartitionKey = tuple[Hashable, int]
"""(topic name, or topic id from Fetch v13, partition index)."""


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == 2**31 - 1:
        return 1
    return epoch + 1


@dataclass(slots=True)
class PartitionRequest:
    """What the fetcher asks of one partition."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1  # a follower's own log start
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: its last request, and what its last response said."""

    request: PartitionRequest
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1

    def must_respond(self, entry: dict[str, Any], records_size: int, update: bool) -> bool:
        """Whether an incremental response must hold this partition (updating the cache)."""
        respond = records_size > 0
        if self.high_watermark != entry["high_watermark"]:
            respond = True
            if update:
                self.high_watermark = entry["high_watermark"]
        if self.log_start_offset != entry["log_start_offset"]:
            respond = True
            if update:
                self.log_start_offset = entry["log_start_offset"]
        # A moved LSO lets a read_committed consumer read on (Kafka answers it too).
        if self.last_stable_offset != entry.get("last_stable_offset", -1):
            respond = True
            if update:
                self.last_stable_offset = entry.get("last_stable_offset", -1)
        if entry.get("preferred_read_replica", -1) >= 0:
            respond = True
        if entry["error_code"]:
            # Sent again once the error is gone: the next answer differs from -1.
            if update:
                self.high_watermark = -1
            respond = True
        if entry.get("diverging_epoch") is not None:
            respond = True  # the fetcher must truncate (Kafka answers it always too)
        return respond


@dataclass(eq=False, slots=True)
class FetchSession:
    id: int
    privileged: bool
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)


class SessionError(Exception):
    """A session the request names cannot be used: answer ``error_code``, no partitions."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class FetchContext:
    """One Fetch request's view of its partitions: full (maybe opening a session),
    sessionless, or incremental over a session."""

    def __init__(
        self,
        cache: FetchSessionCache,
        partitions: OrderedDict[PartitionKey, PartitionRequest],
        *,
        session: FetchSession | None = None,
        request_epoch: int = INITIAL_EPOCH,
        open_session: bool = False,
        privileged: bool = False,
        uses_topic_ids: bool = False,
    ) -> None:
        self._cache = cache
        self.partitions = partitions  # what to read, in response order
        self.session = session
        self._request_epoch = request_epoch
        self._open_session = open_session
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    @property
    def incremental(self) -> bool:
        return self.session is not None

    def finish(
        self, entries: list[tuple[PartitionKey, dict[str, Any], int]], now_ms: int
    ) -> tuple[int, int, list[tuple[PartitionKey, dict[str, Any], int]]]:
        """(error code, session id, the entries to answer) once the partitions are read.

        ``entries``: (key, response entry, records size) for every partition read.
        A full fetch may open a session here; an incremental one keeps only what
        changed and updates its session.
        """
        cache = self._cache
        session = self.session
        if session is None:
            if not self._open_session:
                return 0, INVALID_SESSION_ID, entries
            cached: OrderedDict[PartitionKey, CachedPartition] = OrderedDict()
            for key, entry, _size in entries:
                cached[key] = CachedPartition(
                    self.partitions[key],
                    entry["high_watermark"],
                    entry["log_start_offset"],
                    entry.get("last_stable_offset", -1),
                )
            new_id = cache.maybe_create(now_ms, self._privileged, self._uses_topic_ids, cached)
            return 0, new_id, entries
        if cache.get(session.id) is not session or session.epoch != next_epoch(self._request_epoch):
            # Another request used the session while this one waited (a duplicate).
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        kept = []
        for key, entry, size in entries:
            part = session.partitions.get(key)
            if part is not None and part.must_respond(entry, size, True):
                kept.append((key, entry, size))
                if size > 0:
                    session.partitions.move_to_end(key)
        return 0, session.id, kept


class FetchSessionCache:
    """The broker's sessions, bounded, with Kafka's eviction (see the module docs)."""

    def __init__(
        self,
        max_slots: int,
        *,
        max_partitions: int = DEFAULT_MAX_PARTITIONS,
        eviction_ms: int = EVICTION_MS,
        rng: Callable[[int, int], int] | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.max_partitions = max_partitions
        self.eviction_ms = eviction_ms
        self._randint = rng or random.SystemRandom().randint
        self._sessions: dict[int, FetchSession] = {}
        self._partitions_cached = 0  # kept as sessions change: bounded by max_partitions
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        return self._partitions_cached

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._partitions_cached -= len(session.partitions)
        return session

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        requested: OrderedDict[PartitionKey, PartitionRequest],
        forgotten: Iterable[PartitionKey],
        *,
        privileged: bool,
        now_ms: int,
    ) -> FetchContext:
        """Kafka's FetchManager.newContext; raises SessionError for a session it cannot use."""
        uses_topic_ids = version >= 13
        if version < 7:
            return FetchContext(self, requested)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            return FetchContext(
                self,
                requested,
                open_session=epoch == INITIAL_EPOCH,
                privileged=privileged,
                uses_topic_ids=uses_topic_ids,
            )
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionError(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"no fetch session {session_id}"
            )
        if session.epoch != epoch:
            raise SessionError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session_id} expected epoch {session.epoch}, got {epoch}",
            )
        if session.uses_topic_ids != uses_topic_ids:
            raise SessionError(
                ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                f"fetch session {session_id} was opened "
                f"{'with' if session.uses_topic_ids else 'without'} topic ids",
            )
        parts = session.partitions
        before = len(parts)
        for key, request in requested.items():
            cached = parts.get(key)
            if cached is None:
                parts[key] = CachedPartition(request)
            else:
                cached.request = request
        for key in forgotten:
            parts.pop(key, None)
        self._partitions_cached += len(parts) - before
        if not parts or self._partitions_cached > self.max_partitions:
            # Emptied, or grown past what the cache may hold: closed, and this fetch is
            # answered without a session (session id 0: the client's next fetch is full).
            self.remove(session_id)
            return FetchContext(self, requested)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        everything = OrderedDict((key, cached.request) for key, cached in parts.items())
        return FetchContext(self, everything, session=session, request_epoch=epoch)

    def maybe_create(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: OrderedDict[PartitionKey, CachedPartition],
    ) -> int:
        """A new session's id, or 0 when there is no room (Kafka's maybeCreateSession;
        room for its partitions too, see the module docs)."""
        size = len(partitions)
        if size > self.max_partitions:
            return INVALID_SESSION_ID
        while (
            len(self._sessions) >= self.max_slots
            or self._partitions_cached + size > self.max_partitions
        ):
            if not self._try_evict(privileged, size, now_ms):
                return INVALID_SESSION_ID
        session_id = self._new_id()
        self._sessions[session_id] = FetchSession(
            session_id,
            privileged,
            uses_topic_ids,
            now_ms,
            now_ms,
            next_epoch(INITIAL_EPOCH),
            partitions,
        )
        self._partitions_cached += size
        return session_id

    def _new_id(self) -> int:
        while True:
            candidate = self._randint(1, 2**31 - 1)
            if candidate not in self._sessions:
                return candidate

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        # No stale session: the least valuable evictable one, if it ranks below the new.
        candidates = [
            s
            for s in self._sessions.values()
            if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < victim.evictable_key():
            return False
        self._evict(victim)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1
