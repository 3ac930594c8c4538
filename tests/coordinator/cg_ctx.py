"""Consumer-group (KIP-848) helpers for the coordinator tests: a member as the clients
behave (Java's ConsumerMembershipManager, librdkafka's cgrp), on the shared test context.

A member heartbeats with its epoch and the partitions it owns; when a response
carries an assignment it drops what is no longer there (revocation) and takes the
rest, and says so on its next heartbeat (acknowledgement). It owns nothing it was
not given.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from coord_ctx import Ctx

from odradek.coordinator import CoordinatorConfig
from odradek.coordinator.types import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicIdPartitions,
)

Partition = tuple[uuid.UUID, int]


def cg_ctx(**kw: Any) -> Ctx:
    """A context with short consumer-group timeouts (session 6 s, heartbeat 1 s)."""
    kw.setdefault("consumer_group_session_timeout_ms", 6_000)
    kw.setdefault("consumer_group_heartbeat_interval_ms", 1_000)
    kw.setdefault("group_initial_rebalance_delay_ms", 0)
    return Ctx(CoordinatorConfig(**kw))


@dataclass
class CgMember:
    ctx: Ctx
    member_id: str
    topics: tuple[str, ...] | None = ("foo",)
    regex: str | None = None
    group: str = "g"
    instance_id: str | None = None
    assignor: str | None = None
    epoch: int = 0
    owned: set[Partition] = field(default_factory=set)
    last: ConsumerGroupHeartbeatResponse | None = None

    def owned_wire(self) -> TopicIdPartitions:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in sorted(self.owned, key=lambda tp: (tp[0].bytes, tp[1])):
            by_topic.setdefault(t, []).append(p)
        return tuple((t, tuple(ps)) for t, ps in by_topic.items())

    def request(self, epoch: int | None = None, **kw: Any) -> ConsumerGroupHeartbeatRequest:
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        fields: dict[str, Any] = {
            "instance_id": self.instance_id,
            "rebalance_timeout_ms": 30_000 if joining else -1,
            "subscribed_topic_names": self.topics if joining else None,
            "subscribed_topic_regex": self.regex if joining else None,
            "server_assignor": self.assignor if joining else None,
            "owned": () if joining else self.owned_wire(),
        }
        fields.update(kw)
        return ConsumerGroupHeartbeatRequest(self.group, self.member_id, epoch, **fields)

    def heartbeat(self, **kw: Any) -> ConsumerGroupHeartbeatResponse:
        """One heartbeat; on success the member applies what it was told."""
        r = self.ctx.call(self.request(**kw))
        assert isinstance(r, ConsumerGroupHeartbeatResponse), r
        self.last = r
        if r.error_code == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {(t, p) for t, ps in r.assignment for p in ps}
        return r

    def join(self) -> ConsumerGroupHeartbeatResponse:
        self.epoch = 0
        self.owned = set()
        return self.heartbeat()

    def leave(self, static_pause: bool = False) -> ConsumerGroupHeartbeatResponse:
        r = self.ctx.call(self.request(epoch=-2 if static_pause else -1))
        assert isinstance(r, ConsumerGroupHeartbeatResponse), r
        if r.error_code == 0:
            self.owned = set()
        return r

    def partitions(self, topic: str = "foo") -> set[int]:
        tid = self.ctx.topic_id(topic)
        return {p for t, p in self.owned if t == tid}


def converge(members: list[CgMember], rounds: int = 10) -> None:
    """Heartbeat every member round after round until nothing changes."""
    for _ in range(rounds):
        before = [(m.epoch, frozenset(m.owned)) for m in members]
        for m in members:
            assert m.heartbeat().error_code == 0, m.last
        if [(m.epoch, frozenset(m.owned)) for m in members] == before:
            return
    raise AssertionError("the group did not converge")
