"""The console's two feeds, each a thread with its own client (Odradek's client is
threaded, not asyncio): they keep the ``Model`` current, so pages never wait for the
cluster to list 20,000 groups.

* ``Tail`` reads every partition of ``__consumer_offsets`` from its start and then as it
  grows, as Burrow does: every commit (the lag windows), classic groups' metadata
  (generation, members, assignments), KIP-848 member records, and, on Odradek,
  every group event (rebalances with their causes). It needs READ on the topic; where
  the ACLs refuse it, it says so once and stops, and the poller takes over.
* ``Poller`` asks every ``poll_interval_s``: cluster metadata (brokers, leaders, ISR:
  elections are leader changes between two polls), ListGroups (every group's state, in
  one request per broker; past 5,000 groups every groups / 1,000 seconds), the log end
  offsets of every partition a group commits to,
  DescribeGroups / ConsumerGroupDescribe for the groups someone is looking at and, on
  brokers that record no events, for the groups whose state just changed (their member
  sets before and after a rebalance); committed offsets with OffsetFetch only where
  the tail may not read. Every ``sample_interval_s`` it judges every group again and
  writes a lag sample of each to the ``LagStore``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from odradek.console.lagstore import LagStore
from odradek.console.model import Model
from odradek.protocol.errors import ErrorCode
from odradek.protocol.internal_topics import OFFSETS_TOPIC

log = logging.getLogger("odradek.console")

AUTHORIZATION_FAILURES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "group",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}
POLL_S = 0.5
FETCH_BYTES = 8 * 1024 * 1024
MAX_POLL_RECORDS = 20_000
VIEW_TTL_S = 30.0  # a group page's interest lasts this long after its last request
DESCRIBES_PER_ROUND = 50  # state changes followed up with a describe, per poll
OFFSET_FETCHES_PER_ROUND = 100  # groups whose commits are polled, per poll (no tail)
EXPIRE_EVERY_S = 3600.0
LISTED_GROUPS_PER_S = 1_000  # ListGroups every poll up to 5,000 groups, then less often
RETRY_S = 2.0


def refusal(exc: BaseException, what: str) -> str | None:
    """A one-line message when ``exc`` is an ACL refusal, else None."""
    code = getattr(exc, "code", None)
    if code in AUTHORIZATION_FAILURES:
        return (
            f"{what}: the cluster's ACLs refuse this console's principal "
            f"({AUTHORIZATION_FAILURES[code]} authorization failed)"
        )
    return None


class Tail(threading.Thread):
    def __init__(self, model: Model, settings: dict[str, Any], stop: threading.Event) -> None:
        super().__init__(name="odradek-console-tail", daemon=True)
        self.model = model
        self.settings = settings
        self.stop_event = stop

    def run(self) -> None:
        from odradek.client import Consumer, TopicPartition
        from odradek.client.errors import KafkaError

        positions: dict[Any, int] = {}
        while not self.stop_event.is_set():
            consumer = None
            try:
                consumer = Consumer(
                    auto_offset_reset="earliest",
                    allow_auto_create_topics=False,
                    max_poll_records=MAX_POLL_RECORDS,
                    max_partition_fetch_bytes=FETCH_BYTES,
                    fetch_max_bytes=FETCH_BYTES,
                    **self.settings,
                )
                partitions = consumer.partitions_for_topic(OFFSETS_TOPIC, timeout=5.0)
                if not partitions:
                    self.model.tail_state = f"waiting for {OFFSETS_TOPIC} (no group yet)"
                    consumer.close()
                    self.stop_event.wait(RETRY_S)
                    continue
                tps = [TopicPartition(OFFSETS_TOPIC, p) for p in sorted(partitions)]
                consumer.assign(tps)
                for tp in tps:
                    if tp in positions:
                        consumer.seek(tp, positions[tp])
                ends = consumer.end_offsets(tps, 10.0)
                self.model.tail_state = "catching up"
                while not self.stop_event.is_set():
                    records = consumer.poll(POLL_S)
                    if records:
                        with self.model.batch():
                            for r in records:
                                self.model.apply_record(r.key, r.value, r.timestamp)
                                positions[TopicPartition(r.topic, r.partition)] = r.offset + 1
                    if self.model.tail_state == "catching up" and all(
                        consumer.position(tp, 10.0) >= ends[tp] for tp in tps
                    ):
                        self.model.tail_state = "live"
                        log.info("console: caught up with %s", OFFSETS_TOPIC)
            except KafkaError as exc:
                why = refusal(exc, f"cannot read {OFFSETS_TOPIC}")
                if why is not None:
                    self.model.tail_readable = False
                    self.model.tail_state = (
                        why + "; committed offsets are polled instead and rebalances inferred"
                    )
                    log.warning("console: %s", self.model.tail_state)
                    return
                self.model.tail_state = f"reconnecting: {exc}"
                log.info("console: tail of %s: %s", OFFSETS_TOPIC, exc)
                self.stop_event.wait(RETRY_S)
            except Exception:  # a bug must not end the console's history silently
                log.exception("console: tail of %s failed; starting it again", OFFSETS_TOPIC)
                self.stop_event.wait(RETRY_S)
            finally:
                if consumer is not None:
                    try:
                        consumer.close(timeout=1.0)
                    except Exception:  # closing a broken client: nothing more to do
                        log.debug("console: closing the tail's consumer", exc_info=True)


class Poller(threading.Thread):
    def __init__(
        self,
        model: Model,
        settings: dict[str, Any],
        stop: threading.Event,
        *,
        store: LagStore | None,
        poll_interval_s: float,
        sample_interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name="odradek-console-poller", daemon=True)
        self.model = model
        self.settings = settings
        self.stop_event = stop
        self.store = store
        self.poll_interval_s = poll_interval_s
        self.sample_interval_s = sample_interval_s
        self.clock = clock
        self._viewed: dict[str, float] = {}
        self._viewed_lock = threading.Lock()
        self._next_sample = 0.0
        self._next_expire = 0.0
        self._offsets_cursor = 0
        self.rounds = 0
        self._next_listing = 0.0
        self.wake = threading.Event()
        # Told the cluster's id once it is known (the lag history belongs to one cluster).
        self.on_cluster_id: Callable[[str | None], None] | None = None

    def viewed(self, group_id: str) -> None:
        """Someone looks at this group: describe it on every poll for a while."""
        with self._viewed_lock:
            self._viewed[group_id] = time.monotonic() + VIEW_TTL_S

    def _viewed_groups(self) -> list[str]:
        now = time.monotonic()
        with self._viewed_lock:
            for gid in [g for g, until in self._viewed.items() if until < now]:
                del self._viewed[gid]
            return sorted(self._viewed)

    def run(self) -> None:
        from odradek.client import AdminClient

        admin = None
        try:
            while not self.stop_event.is_set():
                if admin is None:
                    admin = AdminClient(**self.settings)
                started = time.monotonic()
                try:
                    self.poll_once(admin)
                except Exception as exc:
                    log.info("console: poll failed: %s", exc)
                    self.model.cluster.error = str(exc)
                self.rounds += 1
                left = self.poll_interval_s - (time.monotonic() - started)
                self.wake.wait(max(left, 0.05))
                self.wake.clear()
        finally:
            if admin is not None:
                admin.close()

    def poll_once(self, admin: Any) -> None:
        """One round of questions (each failure is kept to its own part)."""
        self._metadata(admin)
        states = {gid: g.state for gid, g in self.model.groups.items()}
        listing_ok = False
        if time.monotonic() >= self._next_listing:
            # ListGroups answers with every group: at 20,000 that costs both sides more
            # than anything else a poll asks, so it is asked less often as groups grow.
            groups = len(self.model.groups)
            self._next_listing = time.monotonic() + max(
                self.poll_interval_s, groups / LISTED_GROUPS_PER_S
            )
            listing_ok = self._listing(admin)
        changed = [
            gid
            for gid, g in list(self.model.groups.items())
            if listing_ok and states.get(gid) != g.state
        ]
        to_describe = self._viewed_groups()
        if not self.model.events_seen or not self.model.tail_readable:
            to_describe += [g for g in changed if g not in to_describe][:DESCRIBES_PER_ROUND]
        self._describe(admin, to_describe)
        if not self.model.tail_readable:
            self._committed(admin)
        self._log_ends(admin)
        now = self.clock()
        if now >= self._next_sample and not self.stop_event.is_set():
            self._next_sample = now + self.sample_interval_s
            self.sample(now)

    def _metadata(self, admin: Any) -> None:
        from odradek.client.errors import KafkaError

        try:
            cluster = admin.describe_cluster()
            topics = admin.describe_topics(None, include_offsets=False)
            self.model.apply_metadata(
                cluster.cluster_id, cluster.controller_id, cluster.brokers, topics
            )
            if self.on_cluster_id is not None:
                self.on_cluster_id(cluster.cluster_id)
        except KafkaError as exc:
            self.model.cluster.error = refusal(exc, "cannot read the cluster's metadata") or str(
                exc
            )

    def _listing(self, admin: Any) -> bool:
        from odradek.client.errors import KafkaError

        try:
            listings = admin.list_consumer_groups()
        except KafkaError as exc:
            log.info("console: ListGroups: %s", exc)
            return False
        self.model.apply_listing(listings)
        return True

    def _describe(self, admin: Any, group_ids: list[str]) -> None:
        from odradek.client.errors import KafkaError

        for gid in group_ids:
            try:
                described = admin.describe_consumer_groups([gid], timeout_ms=5_000)[gid]
            except KafkaError as exc:
                log.debug("console: describe %s: %s", gid, exc)
                continue
            self.model.apply_description(described)

    def _committed(self, admin: Any) -> None:
        from odradek.client.errors import KafkaError

        group_ids = sorted(self.model.groups)
        viewed = self._viewed_groups()
        if not group_ids:
            return
        start = self._offsets_cursor % len(group_ids)
        batch = group_ids[start : start + OFFSET_FETCHES_PER_ROUND]
        self._offsets_cursor = start + len(batch)
        for gid in dict.fromkeys([*viewed, *batch]):
            try:
                offsets = admin.list_consumer_group_offsets(gid, timeout_ms=5_000)
            except KafkaError as exc:
                log.debug("console: OffsetFetch %s: %s", gid, exc)
                continue
            self.model.apply_committed(gid, {tp: o.offset for tp, o in offsets.items()})

    def _log_ends(self, admin: Any) -> None:
        from odradek.client import TopicPartition
        from odradek.client.errors import KafkaError

        tps = self.model.log_end_partitions()
        if not tps:
            return
        known = self.model.cluster.partitions
        wanted = [TopicPartition(*tp) for tp in tps if not known or tp in known]
        try:
            ends = admin.list_offsets(dict.fromkeys(wanted, -1), timeout_ms=5_000)
        except KafkaError as exc:
            log.info("console: log end offsets: %s", exc)
            return
        self.model.apply_log_ends({tp: o.offset for tp, o in ends.items() if o is not None})

    def sample(self, now: float) -> None:
        """Judge every group, and keep one lag sample of each."""
        self.model.evaluate()
        if self.store is None:
            return
        at_ms = int(now * 1000)
        for group_id, layout, values in self.model.samples():
            self.store.record(group_id, at_ms, layout, values)
        self.store.flush()
        if now >= self._next_expire:
            self._next_expire = now + EXPIRE_EVERY_S
            self.store.expire(at_ms)
