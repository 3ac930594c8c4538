"""Driver-side metadata for the source and sink: partitions, offsets, group commits.

One ``ClusterView`` lives in the driver process that plans a query (for a
stream, Spark's long-lived ``python_streaming_source_runner``). It holds one
``KafkaClient`` of Odradek's client and uses its Metadata, ListOffsets and
(for the log end) Fetch calls, and the admin client's group-offset calls for
consumer-group progress. It is never pickled: readers drop it in ``__getstate__``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.client.admin import AdminClient
from odradek.client.cluster import KafkaClient
from odradek.client.config import AdminConfig
from odradek.client.errors import KafkaError, KafkaTimeoutError
from odradek.client.offsets import EARLIEST_TIMESTAMP, list_offsets, log_end_offsets
from odradek.client.structs import OffsetAndMetadata, TopicPartition
from odradek.protocol.errors import ErrorCode

from .options import Subscription


class ClusterView:
    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 30.0,
        client_id: str = "",
        allow_auto_create_topics: bool = False,
        read_committed: bool = False,
        security: Mapping[str, Any] | None = None,
    ) -> None:
        # security: the query's security settings (dotted names), e.g. security.protocol
        settings: dict[str, Any] = {**(security or {}), "bootstrap_servers": bootstrap}
        if client_id:
            settings["client_id"] = client_id
        self._settings = settings
        self._admin_client: AdminClient | None = None
        self.config = AdminConfig.from_settings(**settings)
        # The sink lets the broker auto-create a missing topic, as producers do.
        self.client = KafkaClient(self.config, allow_auto_create_topics=allow_auto_create_topics)
        self.timeout_s = timeout_s
        self.isolation_level = 1 if read_committed else 0  # latest = the LSO when 1

    def close(self) -> None:
        self.client.close()
        if self._admin_client is not None:
            self._admin_client.close()

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
            if meta is None or meta.error_code != ErrorCode.NONE:
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
        """Log end offsets (last stable offsets with read_committed): ListOffsets(latest),
        raised to the high watermark of one small Fetch per leader when that is larger
        (see ``log_end_offsets``; some brokers' ListOffsets under-reports)."""
        tps = list(tps)
        if not tps:
            return {}
        return log_end_offsets(
            self.client, tps, timeout_s=self.timeout_s, isolation_level=self.isolation_level
        )

    def for_times(self, request: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset with a timestamp >= the given one; None when there is none."""
        found = self._list(request)
        return {tp: (o.offset if o is not None else None) for tp, o in found.items()}

    # ------------------------------------------------------------------ groups

    def _admin(self) -> AdminClient:
        """The admin client for group offsets, opened on first use (only when committing)."""
        if self._admin_client is None:
            self._admin_client = AdminClient(**self._settings)
        return self._admin_client

    def commit_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> None:
        """A standalone OffsetCommit (no member, generation -1), as a simple consumer does."""
        if not offsets:
            return
        futures = self._admin().alter_consumer_group_offsets(
            group,
            {tp: OffsetAndMetadata(int(offset), metadata) for tp, offset in offsets.items()},
            timeout_ms=int(self.timeout_s * 1000),
        )
        for future in futures.values():
            future.result(timeout=self.timeout_s)

    def fetch_group_offsets(
        self, group: str, tps: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all of them when ``tps`` is None)."""
        committed = self._admin().list_consumer_group_offsets(
            group, tps, timeout_ms=int(self.timeout_s * 1000)
        )
        return {tp: meta.offset for tp, meta in committed.items()}


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
