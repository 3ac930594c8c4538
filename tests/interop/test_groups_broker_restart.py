"""A broker restart (SIGTERM, and separately SIGKILL) keeps groups and committed offsets.

Before the restart the broker holds three groups on one topic:

- ``idle``: a consumer that subscribed, consumed some records, committed and
  closed (an Empty consumer group with offsets);
- ``simple``: offsets committed by a consumer that never joined (assign()+commit);
- ``live``: a consumer that stays up across the restart, holding all partitions.

After the broker comes back on the same data directory, OffsetFetch
(confluent-kafka ``committed()``) returns exactly the same offsets for every
group, ListGroups still lists the groups, DescribeGroups shows ``idle`` Empty
and ``live`` Stable with its member holding every partition, and records
produced after the restart reach the live member exactly once: it resumes at its
committed offsets, re-reading nothing.
"""

from __future__ import annotations

import time

import pytest
from group_members import (
    Member,
    assert_exactly_once,
    committed_offsets,
    create_topic,
    describe_group,
    expected_offsets,
    group_broker,
    list_groups,
    members_cleanup,
    new_names,
    produce_keyed,
    wait_for_split,
)
from interop_helpers import unique_topic, wait_until

pytestmark = [pytest.mark.timeout(150), pytest.mark.embedded]

PARTITIONS = 6
MESSAGES = 600


def _commit_simple(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    want = {p: 7 * p + 3 for p in range(PARTITIONS)}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in want.items()], asynchronous=False
        )
    finally:
        consumer.close()
    return want


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_broker_restart_keeps_groups_and_committed_offsets(tmp_path, how: str) -> None:
    with group_broker(tmp_path / "data") as broker:
        try:
            _scenario(broker, how)
        except BaseException:
            print("--- broker log tail ---\n" + broker.log_tail(60))
            raise


def _scenario(broker, how: str) -> None:
    bootstrap = broker.bootstrap
    topic, live_group = new_names(f"restart-{how}")
    idle_group = unique_topic(f"restart-{how}-idle")
    simple_group = unique_topic(f"restart-{how}-simple")
    create_topic(bootstrap, topic, PARTITIONS)
    per_partition = produce_keyed(bootstrap, topic, MESSAGES)

    idle = Member("confluent", bootstrap, topic, idle_group, "idle", max_records=250)
    live = Member("confluent", bootstrap, topic, live_group, "live", session_ms=10_000)
    with members_cleanup([idle, live]):
        assert idle.wait_exit(60) == 0, idle.debug()
        wait_until(lambda: len(live.records()) >= MESSAGES, 60, what="live member read all")
        simple_want = _commit_simple(bootstrap, simple_group, topic)

        groups = (idle_group, simple_group, live_group)
        before = {g: committed_offsets(bootstrap, g, topic, PARTITIONS) for g in groups}
        assert before[live_group] == {p: per_partition.get(p, 0) for p in range(PARTITIONS)}
        assert before[simple_group] == simple_want
        assert sum(max(o, 0) for o in before[idle_group].values()) == len(idle.records())
        listed = list_groups(bootstrap)
        assert set(groups) <= set(listed), listed

        restarted_at = time.monotonic()
        if how == "sigkill":
            broker.kill()
        else:
            assert broker.stop() == 0, broker.log_tail()
        broker.start()

        after = {g: committed_offsets(bootstrap, g, topic, PARTITIONS) for g in groups}
        assert after == before
        listed = list_groups(bootstrap)
        assert set(groups) <= set(listed), listed
        idle_desc = describe_group(bootstrap, idle_group)
        assert str(idle_desc.state).endswith("EMPTY"), idle_desc.state
        assert not idle_desc.members

        # The live member carries on: it holds every partition and reads only new records.
        wait_for_split([live], PARTITIONS, 30)
        seen = len(live.records())
        new_per_partition = produce_keyed(bootstrap, topic, 120, prefix="after-restart")
        wait_until(lambda: len(live.records()) >= seen + 120, 60, what="live member read new")
        time.sleep(0.5)
        assert_exactly_once(
            live.records()[seen:],
            expected_offsets(new_per_partition, base=per_partition),
            f"live member after {how}",
        )
        desc = describe_group(bootstrap, live_group)
        assert str(desc.state).endswith("STABLE"), desc.state
        assert [m.client_id for m in desc.members] == ["live"]
        assigned = {tp.partition for tp in desc.members[0].assignment.topic_partitions}
        assert assigned == set(range(PARTITIONS))
        print(
            f"GROUP-LATENCY scenario=broker_{how} live member resumed within "
            f"{time.monotonic() - restarted_at:.3f}s of the restart (incl. checks)"
        )
        rebalances = [e for e in live.rebalance_events(restarted_at)]
        print(f"live member rebalance callbacks after the restart: {rebalances}")
        assert not live.errors(), live.errors()[:3]
        live.close()
