"""A broker's registration lists every advertised listener (Kafka's BrokerRegistration
endpoints); registrations written before it did are still read, their one address
serving every listener as it did then."""

from __future__ import annotations

import json

from odradek.replication.model import BrokerInfo, Endpoint

PLAIN = Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
REPLICATION = Endpoint("REPLICATION", "10.0.0.1", 9094, "SASL_SSL")


def test_endpoints_round_trip_and_are_found_by_listener() -> None:
    info = BrokerInfo(1, "127.0.0.1", 9092, "r1", 42, (PLAIN, REPLICATION))
    assert BrokerInfo.decode(info.encode()) == info
    assert info.address_on("REPLICATION") == ("10.0.0.1", 9094)
    assert info.address_on("PLAINTEXT") == ("127.0.0.1", 9092)
    assert info.address_on("SASL_SSL") is None  # Kafka leaves such a broker out
    assert info.address_on(None) == ("127.0.0.1", 9092)


def test_a_registration_without_endpoints_serves_every_listener_at_its_address() -> None:
    old = json.dumps({"id": 2, "host": "h", "port": 9093, "rack": None}).encode()
    info = BrokerInfo.decode(old)
    assert info.endpoints == ()
    assert info.address_on("REPLICATION") == ("h", 9093)
    assert info.address_on(None) == ("h", 9093)
