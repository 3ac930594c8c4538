"""ListOffsets against partition leaders, shared by the consumer and the admin client."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.errors import KafkaError, KafkaTimeoutError, make_error
from odradek.client.structs import OffsetAndTimestamp, TopicPartition
from odradek.protocol.apikeys import ApiKey

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # ListOffsets v7+

_LEADER_ERRORS = {3, 5, 6, 74, 75}  # unknown topic, no leader, not leader, epoch errors


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
    deadline = time.monotonic() + timeout_s
    pending = dict(timestamps)
    result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    client.add_topics({tp.topic for tp in pending})
    delay = client.config.retry_backoff_ms / 1000
    last_error: BaseException | None = None
    while pending:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise KafkaTimeoutError(
                f"ListOffsets for {sorted(map(str, pending))} timed out"
                + (f" (last error: {last_error})" if last_error else "")
            )
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        missing = False
        for tp, ts in pending.items():
            leader = client.cluster.leader_for(tp)
            if leader < 0:
                missing = True
                continue
            by_leader.setdefault(leader, {})[tp] = ts
        if missing:
            client.request_update()
        sent: list[tuple[dict[TopicPartition, int], Future[Any]]] = []
        for leader, parts in by_leader.items():
            sent.append(
                (
                    parts,
                    client.send(
                        leader,
                        ApiKey.LIST_OFFSETS,
                        _body(parts, isolation_level),
                        timeout_ms=max(1, int(remaining * 1000)),
                    ),
                )
            )
        retry = missing
        for parts, future in sent:
            try:
                response = future.result(timeout=max(0.001, deadline - time.monotonic()) + 1.0)
            except (KafkaError, TimeoutError) as exc:
                last_error = exc
                retry = True
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                client.request_update()
                continue
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in parts:
                        continue
                    code = int(p.error_code)
                    if code == 0:
                        offset = int(p.offset)
                        pending.pop(tp, None)
                        if offset < 0:
                            result[tp] = None
                        else:
                            epoch = int(getattr(p, "leader_epoch", -1))
                            result[tp] = OffsetAndTimestamp(
                                offset, int(p.timestamp), epoch if epoch >= 0 else None
                            )
                    elif code in _LEADER_ERRORS:
                        last_error = make_error(code, str(tp))
                        retry = True
                        client.request_update()
                    else:
                        raise make_error(code, f"ListOffsets {tp}")
        if pending and retry:
            client.maybe_refresh(timeout_s=max(0.001, deadline - time.monotonic()))
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, client.config.retry_backoff_max_ms / 1000)
    return result


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
