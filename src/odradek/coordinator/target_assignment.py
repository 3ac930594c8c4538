"""From members and topics to a consumer group's target assignment (Kafka's
TargetAssignmentBuilder), and the subscription metadata it is computed on.

The coordinator runs the group's server-side assignor over **every** member
when the group epoch moves past the target assignment epoch, and writes one
ConsumerGroupTargetAssignmentMember record per member whose target changed,
then the new target assignment epoch. Members then reach their targets one
heartbeat at a time (``reconciliation``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from odradek.coordinator.consumer_group import ConsumerGroupMember
from odradek.coordinator.consumer_records import (
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    RegexValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
    TopicMetadata,
    consumer_record,
)
from odradek.coordinator.metadata import EMPTY_ASSIGNMENT, Assignment, TopicsImage
from odradek.coordinator.server_assignors import MemberSpec, get_server_assignor
from odradek.coordinator.types import CoordinatorRecord
from odradek.linear_regex import RegexError, compile_linear


class InvalidRegex(ValueError):
    """A subscribed topic regex that does not compile."""


def compile_regex(regex: str) -> Any:
    """The subscription regex, compiled by RE2 (linear time, Kafka's RE2/J syntax)."""
    try:
        return compile_linear(regex)
    except RegexError as exc:
        raise InvalidRegex(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}"
        ) from exc


def resolve_regex(
    regex: str, image: TopicsImage, allowed: frozenset[str] | None = None
) -> tuple[str, ...]:
    """The topics a regex matches (whole names, as Kafka's RE2/J ``matches``), internal ones
    and, when given, those outside ``allowed`` (the member's DESCRIBE permission) excepted,
    sorted."""
    pattern = compile_regex(regex)
    return tuple(
        sorted(
            name
            for name, topic in image.by_name.items()
            if not topic.internal
            and (allowed is None or name in allowed)
            and pattern.fullmatch(name) is not None
        )
    )


def subscription_metadata(names: Iterable[str], image: TopicsImage) -> tuple[TopicMetadata, ...]:
    """The subscribed topics that exist, with their ids and partition counts, by name."""
    out = []
    for name in sorted(set(names)):
        topic = image.by_name.get(name)
        if topic is not None:
            out.append(TopicMetadata(topic.topic_id, name, topic.partitions))
    return tuple(out)


def member_topic_names(member: ConsumerGroupMember, resolved: Mapping[str, RegexValue]) -> set[str]:
    names = set(member.subscribed_topic_names)
    regex = member.subscribed_topic_regex
    if regex:
        found = resolved.get(regex)
        if found is not None:  # an unresolved regex matches nothing yet
            names.update(found.topics)
    return names


def member_topic_ids(
    member: ConsumerGroupMember,
    resolved: Mapping[str, RegexValue],
    subscription: Mapping[str, TopicMetadata],
) -> set[uuid.UUID]:
    out = set()
    for name in member_topic_names(member, resolved):
        topic = subscription.get(name)
        if topic is not None:
            out.add(topic.topic_id)
    return out


def compute_target(
    group_id: str,
    epoch: int,
    assignor_name: str,
    members: Mapping[str, ConsumerGroupMember],
    targets: Mapping[str, Assignment],
    resolved: Mapping[str, RegexValue],
    subscription: Mapping[str, TopicMetadata],
) -> tuple[list[CoordinatorRecord], dict[str, Assignment]]:
    """The new target of every member, and the records that write down what changed.

    ``targets`` is each member's current target (a replacing static member's is
    its predecessor's), the starting point of sticky assignors.
    """
    assignor = get_server_assignor(assignor_name)
    specs = {
        mid: MemberSpec(
            mid,
            m.instance_id,
            frozenset(member_topic_ids(m, resolved, subscription)),
            targets.get(mid, EMPTY_ASSIGNMENT),
        )
        for mid, m in members.items()
    }
    counts = {t.topic_id: t.partitions for t in subscription.values()}
    new = assignor(specs, counts)
    records = []
    for mid in sorted(members):
        assignment = new.get(mid, EMPTY_ASSIGNMENT)
        new[mid] = assignment
        if assignment != targets.get(mid):
            records.append(
                consumer_record(
                    TARGET_ASSIGNMENT_MEMBER,
                    group_id,
                    TargetAssignmentMemberValue(assignment),
                    mid,
                )
            )
    records.append(
        consumer_record(TARGET_ASSIGNMENT_METADATA, group_id, TargetAssignmentEpochValue(epoch))
    )
    return records, new
