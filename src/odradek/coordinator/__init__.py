"""Odradek's group coordinator core: pure, deterministic, event-sourced.

One :class:`GroupCoordinatorShard` owns the groups of one ``__consumer_offsets``
partition (``partition_for(group_id, n)`` picks it, as Kafka does): classic
groups, consumer groups (KIP-848, and the online migration between the two),
their committed and transactional offsets and their histories. It composes one
manager per concept (``shard.py`` lists them) over one shared state. It performs
no I/O and reads no clock, randomness or threads:

- time comes in on every call: ``now_ms`` from a monotonic clock (every
  deadline and timer is computed from it) and ``wall_ms`` from the wall clock
  (only for timestamps written into records and events, and for offsets
  retention, which Kafka defines on those timestamps); callers with a single
  clock may omit ``wall_ms``;
- timers go out through an injected :class:`Timer` (``schedule(key,
  deadline_ms)`` replaces an earlier deadline for ``key``; ``cancel(key)``);
  the runtime calls ``on_timer(now_ms, key)`` when one is due. A timer that
  fires before its deadline is re-armed, never dropped;
- member ids are ``f"{client_id}-{uuid}"`` (``group_instance_id`` instead of
  ``client_id`` for static members) with the uuid from an injected
  :class:`IdGenerator`.

Calling it
----------
``shard = GroupCoordinatorShard(config, timer=timer, ids=ids)``

1. Loading: ``shard.replay(record)`` for every record of the partition from
   the start, then ``shard.on_loaded(now_ms)``. Until then answer requests with
   ``loading_response(request)``. A new, empty partition just calls
   ``on_loaded``. If loading fails, discard the shard and start over.
2. Serving: ``result = shard.handle(now_ms, token, request)`` and
   ``result = shard.on_timer(now_ms, key)``. Both are atomic: if they raise,
   the shard is exactly as before the call (answer that request with an
   error; nothing else is affected). For each :class:`Result`, append
   ``result.records`` to the partition (in one batch if ``result.atomic``),
   ``replay`` each of them in order, and only then send every
   ``(token, response)`` in ``result.responses``. If the append fails,
   call ``shard.abort()`` instead of replaying: the call is undone and its
   responses must not be sent. The token is whatever the runtime passed in
   with the request; JoinGroup and SyncGroup responses can come back from a
   later call, so responses are matched by token, never by position.
   ``result.events`` are structured observations (state transitions,
   completed rebalances); ``events.log_events`` logs them. The core has
   already written them into ``result.records`` too, after the call's own
   records: the group's history, kept in its partition (``history``).
3. Unloading: ``shard.on_unloaded()`` answers parked requests with
   NOT_COORDINATOR and cancels the shard's timers.

The same shard object must see every call in order (one serial executor per
partition). Only when replaying appended records fails does the shard no
longer match its log; then the runtime reloads the partition.

Requests and responses are the neutral dataclasses of :mod:`.types`; error
codes are Kafka's numbers (:class:`ErrorCode`, the one table of
``odradek.protocol.errors``). Records are Kafka's ``__consumer_offsets`` binary
formats (:mod:`.records`, :mod:`.consumer_records`). Each state machine (the
classic group's, the consumer group's and its members') has one table of legal
transitions (:mod:`.transitions`).
"""

from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.routing import java_string_hashcode, partition_for
from odradek.coordinator.shard import GroupCoordinatorShard, error_response, loading_response
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import IdGenerator, Timer
from odradek.coordinator.types import CoordinatorEvent, CoordinatorRecord, Result

__all__ = [
    "CoordinatorConfig",
    "CoordinatorEvent",
    "CoordinatorRecord",
    "ErrorCode",
    "GroupCoordinatorShard",
    "GroupState",
    "IdGenerator",
    "Result",
    "Timer",
    "error_response",
    "java_string_hashcode",
    "loading_response",
    "partition_for",
]
