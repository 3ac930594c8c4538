"""Kafka's connection limits as ConnectionQuotas counts them (issue 19 item 9)."""

from __future__ import annotations

import asyncio
import re

import pytest

from odradek.broker.config import BrokerConfig, ConfigError, parse_host_counts
from odradek.broker.connection_quotas import (
    MAX_DELAY_S,
    ConnectionQuotas,
    TokenBucket,
    normalized_address,
)


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def quotas(*assignments: str, listeners: tuple[str, ...] = ("PLAINTEXT",)) -> ConnectionQuotas:
    return ConnectionQuotas(BrokerConfig.from_assignments(assignments), listeners)


def test_per_ip_limit_refuses_past_the_maximum_and_overrides_win() -> None:
    q = quotas("max.connections.per.ip=2", "max.connections.per.ip.overrides=10.0.0.1:3")
    assert q.admit("PLAINTEXT", "10.0.0.2") and q.admit("PLAINTEXT", "10.0.0.2")
    assert not q.admit("PLAINTEXT", "10.0.0.2")
    assert all(q.admit("PLAINTEXT", "10.0.0.1") for _ in range(3))
    assert not q.admit("PLAINTEXT", "10.0.0.1")
    assert q.refused["PLAINTEXT"] == 2 and q.total == 5  # refused ones are not counted
    q.release("PLAINTEXT", "10.0.0.2")
    assert q.admit("PLAINTEXT", "10.0.0.2")


def test_zero_per_ip_allows_only_the_overridden_hosts() -> None:
    q = quotas("max.connections.per.ip=0", "max.connections.per.ip.overrides=localhost:1")
    assert not q.admit("PLAINTEXT", "192.0.2.7")
    assert q.admit("PLAINTEXT", "127.0.0.1")  # localhost, resolved when the broker starts
    assert not q.admit("PLAINTEXT", "127.0.0.1")


def test_broker_and_listener_limits_decide_whether_a_listener_may_accept() -> None:
    q = quotas(
        "max.connections=3",
        "listener.name.internal.max.connections=1",
        listeners=("PLAINTEXT", "INTERNAL"),
    )
    assert q.admit("INTERNAL", "10.0.0.1")
    assert not q.slot_available("INTERNAL") and q.slot_available("PLAINTEXT")
    assert q.admit("PLAINTEXT", "10.0.0.1") and q.admit("PLAINTEXT", "10.0.0.1")
    assert not q.slot_available("PLAINTEXT")  # 3 over both listeners
    q.release("INTERNAL", "10.0.0.1")
    assert q.slot_available("PLAINTEXT") and q.slot_available("INTERNAL")


def test_an_acceptor_waiting_for_a_slot_goes_on_when_a_connection_closes() -> None:
    async def main() -> None:
        q = quotas("max.connections=1")
        listener = q.listener("PLAINTEXT")
        assert await listener.admit("10.0.0.1")
        waiting = asyncio.create_task(listener.admit("10.0.0.2"))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        listener.release("10.0.0.1")
        assert await asyncio.wait_for(waiting, 1)
        assert q.total == 1

    asyncio.run(main())


def test_creation_rate_lets_a_second_of_connections_through_then_spaces_them() -> None:
    clock = ManualClock()
    bucket = TokenBucket(4, clock)
    assert [bucket.take() for _ in range(4)] == [0, 0, 0, 0]
    assert bucket.take() == pytest.approx(0.25)
    clock.now += 0.25  # the acceptor waited
    assert bucket.take() == pytest.approx(0.25)
    clock.now += 10  # idle: one second's worth again, no more
    assert [bucket.take() for _ in range(5)][-2:] == [0, pytest.approx(0.25)]


def test_creation_rate_zero_delays_each_connection_by_one_quota_window() -> None:
    assert TokenBucket(0, ManualClock()).take() == MAX_DELAY_S


def test_listener_and_broker_rates_both_apply() -> None:
    clock = ManualClock()
    q = ConnectionQuotas(
        BrokerConfig.from_assignments(
            [
                "max.connection.creation.rate=10",
                "listener.name.plaintext.max.connection.creation.rate=2",
            ]
        ),
        ["PLAINTEXT", "OTHER"],
        clock=clock,
    )
    assert q.creation_delay("PLAINTEXT") == 0 and q.creation_delay("PLAINTEXT") == 0
    assert q.creation_delay("PLAINTEXT") == pytest.approx(0.5)  # the listener's 2/s
    assert q.creation_delay("OTHER") == 0  # the broker's 10/s still has room


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("hostName:100,127.0.0.1:200", {"hostName": 100, "127.0.0.1": 200}),
        (" a:1 , b:2 ,", {"a": 1, "b": 2}),
        ("::1:5,fe80::1%eth0:2", {"::1": 5, "fe80::1%eth0": 2}),  # split at the last ':'
    ],
)
def test_overrides_parse_as_kafka_reads_them(text: str, expected: dict[str, int]) -> None:
    assert parse_host_counts(text) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("host", "'host' is not host:count"),
        (":5", "':5' is not host:count"),
        ("host:many", "'host:many': the count must be a whole number, at least 0"),
        ("host:-1", "'host:-1': the count must be a whole number, at least 0"),
        ("bad/host:1", "'bad/host' is not a host name or address"),
    ],
)
def test_a_bad_override_is_a_one_line_setting_error(value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as error:
        BrokerConfig.from_assignments([f"max.connections.per.ip.overrides={value}"])
    message = str(error.value)
    assert "\n" not in message
    assert message == (
        f"Invalid value {value} for configuration max.connections.per.ip.overrides: {reason}"
    )


def test_an_unresolvable_override_host_is_a_setting_error() -> None:
    with pytest.raises(ConfigError, match=re.escape("cannot resolve 'no-such-host.invalid'")):
        quotas("max.connections.per.ip.overrides=no-such-host.invalid:3")


def test_connections_are_counted_under_their_plain_address() -> None:
    assert normalized_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert normalized_address("fe80::1%eth0") == "fe80::1"
    assert normalized_address("127.0.0.1") == "127.0.0.1"
