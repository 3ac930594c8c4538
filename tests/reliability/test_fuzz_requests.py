"""Fuzz the broker with whole, well-framed requests of every API it serves.

Each example is a request entity drawn with hypothesis (`from_type` over kio's
schemas, random values in every field) sent on a raw connection. The broker
must answer it (an error code is an answer) or close that one connection, and
meanwhile a real client keeps producing and consuming on another connection:
every record it had acknowledged is read back at the end.
"""

from __future__ import annotations

import dataclasses
import datetime
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records, i64Timedelta

from odradek.broker import apis  # noqa: F401  (fills the registry)
from odradek.broker.registry import REGISTRY
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, encode_request, request_type

from .helpers import LimitedBroker

pytestmark = pytest.mark.embedded

# As in tests/protocol/test_codec.py: opaque record bytes, and durations a timedelta holds.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms)),
)

SERVED = sorted(
    (int(spec.key), version)
    for spec in REGISTRY.values()
    for version in range(spec.parse_from, spec.max_version + 1)
)
VICTIM_TOPIC = "fuzz-victim"
LONGEST_WAIT = datetime.timedelta(seconds=1)
# Requests that may park (a long poll, a rebalance) until their timeouts run out.
PARKING_APIS = frozenset({ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
ANSWER_TIMEOUT_S = 10.0


def tame(value: Any) -> Any:
    """Keep what a request makes the broker do within the test's time, not its shape.

    Durations are capped at a second (long polls and rebalance waits), and
    partition counts a node would accept are kept small (one example must not
    create 90,000 partitions); counts beyond the broker's limit are kept as
    drawn, so the refusal is still exercised.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: tame(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in ("num_partitions", "count"):
            if name in changes and 16 < changes[name] <= 100_000:
                changes[name] = type(changes[name])(changes[name] % 17)
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(tame(v) for v in value)
    if isinstance(value, datetime.timedelta) and value > LONGEST_WAIT:
        return type(value)(seconds=1) if type(value) is datetime.timedelta else value
    return value


class Victim:
    """A confluent-kafka producer and consumer working on one topic during the fuzzing."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: set[bytes] = set()
        self.consumed: set[bytes] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def __enter__(self) -> Victim:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.add(msg.value())
            else:
                self.errors.append(str(err))

        n = 0
        while not self._stop.is_set():
            producer.produce(VICTIM_TOPIC, f"v{n}".encode(), on_delivery=delivered)
            n += 1
            producer.poll(0.01)
        assert producer.flush(30) == 0

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "fuzz-victim-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([VICTIM_TOPIC])
        try:
            while not self._stop.is_set():
                for message in consumer.consume(100, 0.2):
                    if message.error() is None:
                        self.consumed.add(message.value())
        finally:
            consumer.close()

    def read_back(self) -> set[bytes]:
        """Every value in the topic, read from the start by a fresh consumer."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"fuzz-check-{uuid.uuid4()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([VICTIM_TOPIC])
        seen: set[bytes] = set()
        try:
            idle = 0
            while idle < 10 and not self.acked <= seen:
                batch = consumer.consume(1000, 1.0)
                idle = idle + 1 if not batch else 0
                seen.update(m.value() for m in batch if m.error() is None)
        finally:
            consumer.close()
        return seen


class RawConnection:
    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.address = (host, int(port))
        self.sock: socket.socket | None = None

    def exchange(self, frame: bytes, correlation: int, *, answered: bool = True) -> str:
        """Send one request: 'answered', 'closed' by the broker, or 'parked' past the timeout.

        A request that gets no answer by design (acks=0 Produce) is only 'sent'.
        """
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=ANSWER_TIMEOUT_S)
        try:
            self.sock.sendall(frame)
            if not answered:
                return "sent"
            size = struct.unpack(">i", self._read(4))[0]
            body = self._read(size)
        except TimeoutError:
            self.reset()
            return "parked"
        except ConnectionError:
            self.reset()
            return "closed"
        assert struct.unpack_from(">i", body)[0] == correlation
        return "answered"

    def _read(self, n: int) -> bytes:
        assert self.sock is not None
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def reset(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LimitedBroker]:
    data = Path(tmp_path_factory.mktemp("fuzz")) / "data"
    broker = LimitedBroker(
        data,
        settings={
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.max.per.request": "10",
        },
    ).start()
    yield broker
    broker.kill()


@pytest.mark.timeout(600)
def test_random_requests_of_every_api_while_a_client_works(fuzz_broker: LimitedBroker) -> None:
    outcomes: dict[str, int] = {"answered": 0, "closed": 0, "parked": 0, "sent": 0}
    unexpected_parks: list[str] = []
    connection = RawConnection(fuzz_broker.bootstrap)
    correlation = iter(range(1, 2**31))

    @settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        api_key, version = data.draw(st.sampled_from(SERVED))
        body = tame(data.draw(st.from_type(request_type(api_key, version))))
        cid = next(correlation)
        frame = encode_request(RequestHeader(api_key, version, cid, "fuzzer"), body)
        silent = api_key == ApiKey.PRODUCE and getattr(body, "acks", None) == 0
        outcome = connection.exchange(frame, cid, answered=not silent)
        outcomes[outcome] += 1
        if outcome == "parked" and api_key not in PARKING_APIS:
            unexpected_parks.append(f"{ApiKey(api_key).name} v{version}: {body!r:.300}")

    with Victim(fuzz_broker.bootstrap) as victim:
        fuzz()
    connection.reset()
    assert fuzz_broker.running, fuzz_broker.log_tail()
    assert unexpected_parks == []
    assert outcomes["answered"] > outcomes["closed"], outcomes
    assert victim.acked, "the victim client produced nothing while the fuzzer ran"
    assert victim.consumed, "the victim client consumed nothing while the fuzzer ran"
    missing = victim.acked - victim.read_back()
    assert not missing, f"{len(missing)} acknowledged records are gone, e.g. {sorted(missing)[:5]}"
    log_text = fuzz_broker.log_path.read_text(errors="replace")
    assert "handler failed" not in log_text, log_text[-5000:]
