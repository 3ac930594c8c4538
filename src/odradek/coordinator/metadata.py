"""What the coordinator knows of the cluster's topics: an immutable, versioned image.

Consumer groups (KIP-848) are assigned by the coordinator itself, so unlike the
classic protocol the core needs the topics: their ids, names and partition
counts. The runtime builds a :class:`TopicsImage` from the broker's topics and
hands it to each shard (``GroupCoordinatorShard.update_metadata``) whenever a
topic is created, deleted or grows; the core never looks the topics up itself.
``version`` only grows: a group compares it with the version it last checked
to know that its subscribed topics may have changed.

Partition assignments are kept by topic id, as in Kafka's records:
``Assignment = {topic_id: frozenset(partitions)}``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False  # regexes never match internal topics


@dataclass(frozen=True, slots=True)
class TopicsImage:
    version: int = 0
    by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)

    @classmethod
    def of(cls, version: int, topics: Iterable[TopicImage]) -> TopicsImage:
        listed = list(topics)
        return cls(version, {t.name: t for t in listed}, {t.topic_id: t for t in listed})

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.name


EMPTY_IMAGE = TopicsImage()


def normalize(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """Frozen partition sets, without empty topics (so equal assignments compare equal)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id, partitions in assignment.items():
        frozen = frozenset(partitions)
        if frozen:
            out[topic_id] = frozen
    return out


def by_name(assignment: Assignment, image: TopicsImage) -> dict[str, list[int]]:
    """``{topic name: sorted partitions}``; topics the image no longer has are left out."""
    out: dict[str, list[int]] = {}
    for topic_id, partitions in assignment.items():
        name = image.name_of(topic_id)
        if name is not None:
            out[name] = sorted(partitions)
    return dict(sorted(out.items()))
