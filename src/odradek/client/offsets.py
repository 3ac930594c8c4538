"""ListOffsets against partition leaders, shared by the consumer and the admin client.

``log_end_offsets`` also asks each leader for its high watermark with one tiny
Fetch: the log end a consumer can read to, which every Fetch response carries.
Some Kafka-compatible brokers under-report ListOffsets(latest) (tansu counts
record batches, not records); the high watermark is right on all of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.errors import STALE_METADATA, KafkaError, KafkaTimeoutError, make_error
from odradek.client.structs import OffsetAndTimestamp, TopicPartition
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # ListOffsets v7+

# The probe Fetch waits at most this long at the log end. Not 0: tansu answers a Fetch
# with max_wait 0 with no partitions at all. Kafka answers at once (min_bytes 0).
PROBE_MAX_WAIT_MS = 1
PROBE_RETRY_MAX_WAIT_MS = 100  # for partitions a broker left out of the first answer


def list_offsets(
    client: KafkaClient,
    timestamps: Mapping[TopicPartition, int],
    *,
    timeout_s: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Offsets for ``{tp: timestamp}`` (-2 earliest, -1 latest, else the first offset whose
    timestamp is >= it). None for a timestamp after the last record. Retries leader
    errors with metadata refreshes until ``timeout_s``; other errors raise."""
    pending = dict(timestamps)
    result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    client.add_topics({tp.topic for tp in pending})

    def request(parts: Mapping[TopicPartition, int]) -> tuple[int, Any]:
        return ApiKey.LIST_OFFSETS, _body(parts, isolation_level)

    def absorb(response: Any, parts: Mapping[TopicPartition, int]) -> list[KafkaError]:
        retriable: list[KafkaError] = []
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if tp not in parts:
                    continue
                code = int(p.error_code)
                if code == ErrorCode.NONE:
                    offset = int(p.offset)
                    pending.pop(tp, None)
                    if offset < 0:
                        result[tp] = None
                    else:
                        epoch = int(getattr(p, "leader_epoch", -1))
                        result[tp] = OffsetAndTimestamp(
                            offset, int(p.timestamp), epoch if epoch >= 0 else None
                        )
                elif code in STALE_METADATA:
                    retriable.append(make_error(code, str(tp)))
                else:
                    raise make_error(code, f"ListOffsets {tp}")
        return retriable

    ask_leaders(client, pending, timeout_s, "ListOffsets", request, absorb)
    return result


def ask_leaders(
    client: KafkaClient,
    pending: dict[TopicPartition, int],
    timeout_s: float,
    what: str,
    request: Callable[[Mapping[TopicPartition, int]], tuple[int, Any]],
    absorb: Callable[[Any, Mapping[TopicPartition, int]], list[KafkaError]],
) -> None:
    """Send one request per partition leader until ``pending`` is empty.

    ``absorb`` reads a leader's answer: it removes the partitions it settled from
    ``pending``, raises on a fatal error, and returns the retriable ones. Leader errors
    and lost connections are retried with metadata refreshes and backoff until
    ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    delay = client.config.retry_backoff_ms / 1000
    last_error: BaseException | None = None
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaTimeoutError(
                f"{what} for {sorted(map(str, pending))} timed out"
                + (f" (last error: {last_error})" if last_error else "")
            )
        by_leader, missing = _by_leader(client, pending)
        if missing:
            # Leaders not known yet (the first request for these topics): wait for the
            # metadata now rather than a backoff later.
            client.request_update()
            client.maybe_refresh(timeout_s=remaining)
            by_leader, missing = _by_leader(client, pending)
            if missing:
                client.request_update()
        sent: list[tuple[dict[TopicPartition, int], Future[Any]]] = []
        for leader, parts in by_leader.items():
            api_key, body = request(parts)
            timeout_ms = max(1, int(remaining * 1000))
            sent.append((parts, client.send(leader, api_key, body, timeout_ms=timeout_ms)))
        retry = missing
        for parts, future in sent:
            try:
                response = future.result(timeout=max(0.001, deadline - time.monotonic()) + 1.0)
            except (KafkaError, TimeoutError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                last_error = exc
                retry = True
                client.request_update()
                continue
            retriable = absorb(response, parts)
            if retriable:
                last_error = retriable[-1]
                retry = True
                client.request_update()
        if pending and retry:
            client.maybe_refresh(timeout_s=max(0.001, deadline - time.monotonic()))
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, client.config.retry_backoff_max_ms / 1000)


def _by_leader(
    client: KafkaClient, pending: Mapping[TopicPartition, int]
) -> tuple[dict[int, dict[TopicPartition, int]], bool]:
    """Pending partitions grouped by leader, and whether some leader is unknown."""
    by_leader: dict[int, dict[TopicPartition, int]] = {}
    missing = False
    for tp, value in pending.items():
        leader = client.cluster.leader_for(tp)
        if leader < 0:
            missing = True
            continue
        by_leader.setdefault(leader, {})[tp] = value
    return by_leader, missing


def _body(parts: Mapping[TopicPartition, int], isolation_level: int) -> Any:
    topics: dict[str, list[dict[str, int]]] = {}
    for tp, ts in parts.items():
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "current_leader_epoch": -1,
                "timestamp": ts,
                "max_num_offsets": 1,
            }
        )

    return {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [{"name": name, "partitions": ps} for name, ps in topics.items()],
    }


def log_end_offsets(
    client: KafkaClient,
    partitions: Iterable[TopicPartition],
    *,
    timeout_s: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, int]:
    """The offset after the last readable record of each partition (the last stable offset
    with ``isolation_level=1``): the larger of ListOffsets(latest) and the high watermark
    (last stable offset) of one small Fetch per leader, sent at the ListOffsets answer.
    Both are exact on Kafka; the Fetch guards against brokers whose ListOffsets lags."""
    deadline = time.monotonic() + timeout_s
    listed = list_offsets(
        client,
        dict.fromkeys(partitions, LATEST_TIMESTAMP),
        timeout_s=timeout_s,
        isolation_level=isolation_level,
    )
    ends = {tp: (o.offset if o is not None else 0) for tp, o in listed.items()}
    marks = high_watermarks(
        client,
        ends,
        timeout_s=max(0.001, deadline - time.monotonic()),
        isolation_level=isolation_level,
    )
    return {tp: max(end, marks.get(tp, -1)) for tp, end in ends.items()}


def high_watermarks(
    client: KafkaClient,
    positions: Mapping[TopicPartition, int],
    *,
    timeout_s: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, int]:
    """High watermarks (last stable offsets with ``isolation_level=1``) from one Fetch per
    leader at ``positions`` (clamped to >= 0), asking for almost no data. A partition whose
    fetch offset is out of range keeps the watermark only if the broker sent one. Leader
    errors are retried with metadata refreshes until ``timeout_s``; other errors raise."""
    pending = {tp: max(0, int(off)) for tp, off in positions.items()}
    result: dict[TopicPartition, int] = {}
    max_wait_ms = PROBE_MAX_WAIT_MS

    def request(parts: Mapping[TopicPartition, int]) -> tuple[int, Any]:
        return ApiKey.FETCH, _probe_body(parts, isolation_level, max_wait_ms)

    def absorb(response: Any, parts: Mapping[TopicPartition, int]) -> list[KafkaError]:
        nonlocal max_wait_ms
        top_error = int(getattr(response, "error_code", 0))
        if top_error:
            error = make_error(top_error, "Fetch (high watermark)")
            if not error.retriable:
                raise error
            return [error]
        retriable: list[KafkaError] = []
        answered = set()
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, int(p.partition_index))
                if tp not in parts:
                    continue
                answered.add(tp)
                code = int(p.error_code)
                mark = int(p.high_watermark)
                if isolation_level == 1 and int(getattr(p, "last_stable_offset", -1)) >= 0:
                    mark = int(p.last_stable_offset)
                if code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                    pending.pop(tp, None)
                    if mark >= 0:
                        result[tp] = mark
                elif code in STALE_METADATA:
                    retriable.append(make_error(code, str(tp)))
                else:
                    raise make_error(code, f"Fetch (high watermark) {tp}")
        if answered != set(parts):
            # Left out of the answer (tansu does that when max_wait is too short):
            # ask again, waiting longer.
            max_wait_ms = PROBE_RETRY_MAX_WAIT_MS
            retriable.append(KafkaTimeoutError("partitions missing from the Fetch answer"))
        return retriable

    ask_leaders(client, pending, timeout_s, "high watermarks", request, absorb)
    return result


def _probe_body(
    parts: Mapping[TopicPartition, int], isolation_level: int, max_wait_ms: int
) -> dict[str, Any]:
    """A Fetch that returns at once with (almost) no records: min_bytes 0, 1 byte caps."""
    return fetch_request_body(
        parts,
        max_wait_ms=max_wait_ms,
        min_bytes=0,
        max_bytes=1,
        partition_max_bytes=1,
        isolation_level=isolation_level,
    )


def fetch_request_body(
    positions: Mapping[TopicPartition, int],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    isolation_level: int,
    rack_id: str = "",
) -> dict[str, Any]:
    """A full Fetch (no fetch session) of ``positions``, as a dict for ``codec.build``."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, offset in positions.items():
        topics.setdefault(tp.topic, []).append(
            {
                "partition": tp.partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            }
        )
    return {
        "cluster_id": None,
        "replica_id": -1,
        "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,  # no fetch session
        "topics": [{"topic": name, "partitions": ps} for name, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": rack_id,
    }
