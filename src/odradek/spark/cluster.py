"""Driver-side metadata for the source and sink: partitions, offsets, group commits.

One ``ClusterView`` lives in the driver process that plans a query (for a
stream, Spark's long-lived ``python_streaming_source_runner``). It holds one
``KafkaClient`` of Odradek's client and uses its Metadata and ListOffsets
calls, plus FindCoordinator / OffsetCommit / OffsetFetch for consumer-group
progress. It is never pickled: readers drop it in ``__getstate__``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.config import AdminConfig
from odradek.client.errors import KafkaError, KafkaTimeoutError, make_error
from odradek.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from odradek.client.structs import TopicPartition
from odradek.protocol.apikeys import ApiKey

from .options import Subscription

# Retriable group errors: coordinator loading / not available / not coordinator.
_COORDINATOR_ERRORS = {14, 15, 16}


class ClusterView:
    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 30.0,
        client_id: str = "",
        allow_auto_create_topics: bool = False,
        read_committed: bool = False,
    ) -> None:
        settings: dict[str, Any] = {"bootstrap_servers": bootstrap}
        if client_id:
            settings["client_id"] = client_id
        self.config = AdminConfig.from_settings(**settings)
        # The sink lets the broker auto-create a missing topic, as producers do.
        self.client = KafkaClient(self.config, allow_auto_create_topics=allow_auto_create_topics)
        self.timeout_s = timeout_s
        self.isolation_level = 1 if read_committed else 0  # latest = the LSO when 1
        self._coordinators: dict[str, int] = {}

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ partitions

    def partitions(self, sub: Subscription) -> list[TopicPartition]:
        """The partitions the subscription covers right now (sorted)."""
        if sub.kind == "assign":
            return [TopicPartition(t, p) for t, p in sub.partitions]
        if sub.kind == "subscribe":
            cluster = self.client.refresh(sub.topics, timeout_s=self.timeout_s)
            names = [t for t in sub.topics if t in cluster.topics]
        else:
            cluster = self.client.refresh(all_topics=True, timeout_s=self.timeout_s)
            rx = re.compile(sub.pattern or "")
            names = [
                t
                for t, meta in cluster.topics.items()
                if not meta.is_internal and not t.startswith("__") and rx.fullmatch(t)
            ]
        out: list[TopicPartition] = []
        for name in names:
            meta = cluster.topics.get(name)
            if meta is None or meta.error_code != 0:
                continue
            out.extend(TopicPartition(name, p) for p in meta.partitions)
        return sorted(out)

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for topic in topics:
            out[topic] = len(self.client.wait_for_topic(topic, self.timeout_s))
        return out

    # ------------------------------------------------------------------ offsets

    def _list(self, request: Mapping[TopicPartition, int]) -> dict[TopicPartition, Any]:
        if not request:
            return {}
        return list_offsets(
            self.client,
            dict(request),
            timeout_s=self.timeout_s,
            isolation_level=self.isolation_level,
        )

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = self._list(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
        return {tp: (o.offset if o is not None else 0) for tp, o in found.items()}

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = self._list(dict.fromkeys(tps, LATEST_TIMESTAMP))
        return {tp: (o.offset if o is not None else 0) for tp, o in found.items()}

    def for_times(self, request: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset with a timestamp >= the given one; None when there is none."""
        found = self._list(request)
        return {tp: (o.offset if o is not None else None) for tp, o in found.items()}

    # ------------------------------------------------------------------ groups

    def _coordinator(self, group: str, deadline: float) -> int:
        node = self._coordinators.get(group)
        if node is not None:
            return node
        self.client.bootstrap(timeout_s=max(0.001, deadline - time.monotonic()))
        while True:
            target = self.client.least_loaded_node()
            if target is None:
                target = next(iter(self.client.cluster.brokers))
            response = self.client.request(
                target,
                ApiKey.FIND_COORDINATOR,
                {"key": group, "key_type": 0, "coordinator_keys": [group]},
            )
            entry = response.coordinators[0] if hasattr(response, "coordinators") else response
            code = int(entry.error_code)
            if code == 0:
                node = int(entry.node_id)
                if node not in self.client.cluster.brokers:
                    self.client.refresh(timeout_s=max(0.001, deadline - time.monotonic()))
                self._coordinators[group] = node
                return node
            if code not in _COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise make_error(code, f"FindCoordinator({group})")
            time.sleep(0.1)

    def commit_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> None:
        """A standalone OffsetCommit (no member, generation -1), as a simple consumer does."""
        if not offsets:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, off in sorted(offsets.items()):
            topics.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": int(off),
                    "committed_leader_epoch": -1,
                    "committed_metadata": metadata,
                }
            )
        body = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self._coordinator(group, deadline)
            try:
                response = self.client.request(node, ApiKey.OFFSET_COMMIT, body)
            except KafkaError as exc:
                self._coordinators.pop(group, None)
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
                continue
            codes = {int(p.error_code) for t in response.topics for p in t.partitions}
            codes.discard(0)
            if not codes:
                return
            code = codes.pop()
            if code in _COORDINATOR_ERRORS and time.monotonic() < deadline:
                self._coordinators.pop(group, None)
                time.sleep(0.1)
                continue
            raise make_error(code, f"OffsetCommit({group})")

    def fetch_group_offsets(
        self, group: str, tps: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all of them when ``tps`` is None); -1 entries dropped."""
        wanted = None
        if tps is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            wanted = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        def body(version: int) -> dict[str, Any]:
            if version >= 8:
                return {"groups": [{"group_id": group, "topics": wanted}], "require_stable": False}
            return {"group_id": group, "topics": wanted, "require_stable": False}

        deadline = time.monotonic() + self.timeout_s
        while True:
            node = self._coordinator(group, deadline)
            response = self.client.request(node, ApiKey.OFFSET_FETCH, body)
            topics = response.groups[0].topics if hasattr(response, "groups") else response.topics
            code = int(
                response.groups[0].error_code
                if hasattr(response, "groups")
                else getattr(response, "error_code", 0)
            )
            if code in _COORDINATOR_ERRORS and time.monotonic() < deadline:
                self._coordinators.pop(group, None)
                time.sleep(0.1)
                continue
            if code:
                raise make_error(code, f"OffsetFetch({group})")
            out: dict[TopicPartition, int] = {}
            for t in topics:
                for p in t.partitions:
                    if int(p.committed_offset) >= 0:
                        out[TopicPartition(t.name, int(p.partition_index))] = int(
                            p.committed_offset
                        )
            return out


def retry(fn: Any, retries: int, interval_s: float) -> Any:
    """Run ``fn()``; on a KafkaError try again up to ``retries`` more times."""
    attempt = 0
    while True:
        try:
            return fn()
        except (KafkaError, KafkaTimeoutError):
            if attempt >= retries:
                raise
            attempt += 1
            time.sleep(interval_s)
