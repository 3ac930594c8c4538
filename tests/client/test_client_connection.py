"""Connection layer: version negotiation, pipelined requests, timeouts, reconnects, metadata."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from odradek.client import errors
from odradek.client.cluster import KafkaClient, metadata_request_body
from odradek.client.config import AdminConfig
from odradek.client.connection import BrokerConnection, ConnectionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, encode_response, response_type
from odradek.protocol.framing import FrameDecoder

pytestmark = pytest.mark.timeout(60)

EMPTY_METADATA = metadata_request_body([], allow_auto_create=False)


def _config(bootstrap: str, **kw: object) -> AdminConfig:
    return AdminConfig.from_settings(bootstrap_servers=bootstrap, **kw)


def _connect(bootstrap: str, **kw: object) -> BrokerConnection:
    host, _, port = bootstrap.rpartition(":")
    conn = BrokerConnection(-1, host, int(port), _config(bootstrap, **kw))
    conn.ensure_ready(10)
    return conn


def test_error_classes() -> None:
    assert errors.error_for_code(6) is errors.NotLeaderOrFollowerError
    assert errors.NotLeaderOrFollowerError.retriable
    assert errors.error_for_code(36) is errors.TopicAlreadyExistsError
    assert not errors.TopicAlreadyExistsError.retriable
    rebalance = errors.error_for_code(27)
    assert rebalance.__name__ == "RebalanceInProgressError" and rebalance.code == 27
    assert errors.error_for_code(17) is errors.InvalidTopicError  # invalid_topic_exception
    assert errors.error_for_code(12345) is errors.UnknownServerError
    err = errors.make_error(3, "x")
    assert isinstance(err, errors.KafkaError) and err.code == 3 and err.retriable


def test_api_versions_negotiated(any_bootstrap: str) -> None:
    conn = _connect(any_bootstrap)
    try:
        assert conn.ready
        for api in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS):
            bmin, bmax = conn.broker_versions[api]
            cmin, cmax = conn.client_versions[api]
            assert conn.versions[api] == min(bmax, cmax) >= max(bmin, cmin)
    finally:
        conn.close()


def test_many_requests_in_flight(any_bootstrap: str) -> None:
    """Dozens of requests from several threads on one connection, matched by correlation id."""
    conn = _connect(any_bootstrap)
    results: list[object] = []
    lock = threading.Lock()

    def worker() -> None:
        futures = [conn.send(ApiKey.METADATA, EMPTY_METADATA) for _ in range(25)]
        for f in futures:
            r = f.result(10)
            with lock:
                results.append(r)

    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 100
        assert all(r.brokers for r in results)  # type: ignore[attr-defined]
        assert conn.in_flight_count == 0
    finally:
        conn.close()


def test_reconnect_after_disconnect(bootstrap: str) -> None:
    conn = _connect(bootstrap)
    try:
        conn.disconnect("test")
        assert conn.state is ConnectionState.DISCONNECTED
        f = conn.send(ApiKey.METADATA, EMPTY_METADATA)
        with pytest.raises(errors.KafkaConnectionError):
            f.result(5)
        conn.ensure_ready(10)
        r = conn.request(ApiKey.METADATA, EMPTY_METADATA)
        assert r.brokers
    finally:
        conn.close()


def test_connect_refused_backs_off() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conn = BrokerConnection(
        -1,
        "127.0.0.1",
        port,
        _config(f"127.0.0.1:{port}", reconnect_backoff_ms=200, reconnect_backoff_max_ms=400),
    )
    with pytest.raises(errors.KafkaConnectionError):
        conn.ensure_ready(1)
    assert conn.backoff_remaining() > 0.1
    with pytest.raises(errors.KafkaConnectionError, match="backing off"):
        conn.ensure_ready(0.01)


class _FakeBroker:
    """A socket server answering ApiVersions with UNSUPPORTED_VERSION until the version
    is <= ``max_version`` and never answering anything else (for timeout tests)."""

    def __init__(self, max_version: int) -> None:
        self.max_version = max_version
        self.versions_seen: list[int] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        decoder = FrameDecoder()
        with client:
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for frame in decoder.feed(data):
                    api, version, correlation = struct.unpack_from(">hhi", frame, 0)
                    if api != ApiKey.API_VERSIONS:
                        continue  # silence: the client's request must time out
                    self.versions_seen.append(version)
                    ok = version <= self.max_version
                    reply_version = version if ok else 0
                    body = build(
                        response_type(ApiKey.API_VERSIONS, reply_version),
                        {
                            "error_code": 0 if ok else 35,
                            "api_keys": [
                                {
                                    "api_key": ApiKey.API_VERSIONS,
                                    "min_version": 0,
                                    "max_version": self.max_version,
                                },
                                {"api_key": ApiKey.METADATA, "min_version": 0, "max_version": 9},
                            ],
                            "throttle_time": 0,
                            "supported_features": (),
                            "finalized_features_epoch": -1,
                            "finalized_features": (),
                            "zk_migration_ready": False,
                        },
                    )
                    client.sendall(
                        encode_response(ApiKey.API_VERSIONS, reply_version, correlation, body)
                    )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fake_broker() -> Iterator[_FakeBroker]:
    fake = _FakeBroker(max_version=1)
    yield fake
    fake.close()


def test_api_versions_fallback_on_unsupported_version(fake_broker: _FakeBroker) -> None:
    conn = _connect(f"127.0.0.1:{fake_broker.port}")
    try:
        assert fake_broker.versions_seen == [3, 1]
        assert conn.versions[ApiKey.API_VERSIONS] == 1
        assert conn.versions[ApiKey.METADATA] == 9
        assert ApiKey.PRODUCE not in conn.versions
        with pytest.raises(errors.IncompatibleBrokerVersionError):
            conn.api_version(ApiKey.PRODUCE)
    finally:
        conn.close()


def test_request_timeout_fails_request_and_drops_connection(fake_broker: _FakeBroker) -> None:
    conn = _connect(f"127.0.0.1:{fake_broker.port}")
    try:
        started = time.monotonic()
        slow = conn.send(ApiKey.METADATA, EMPTY_METADATA, timeout_ms=5_000)
        fast = conn.send(ApiKey.METADATA, EMPTY_METADATA, timeout_ms=300)
        with pytest.raises(errors.KafkaTimeoutError):
            fast.result(5)
        assert time.monotonic() - started < 2
        # As in the Java client, the timed-out connection is closed: the rest fail too.
        with pytest.raises(errors.KafkaConnectionError):
            slow.result(5)
        assert conn.state is ConnectionState.DISCONNECTED
    finally:
        conn.close()


def test_metadata_bootstrap_and_refresh(any_bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(any_bootstrap, topic_name, 3)
    bad = "127.0.0.1:1"
    client = KafkaClient(_config(f"{bad},{any_bootstrap}", metadata_max_age_ms=200))
    try:
        cluster = client.refresh([topic_name], timeout_s=10)
        assert cluster.brokers
        assert client.wait_for_topic(topic_name, 10) == [0, 1, 2]
        assert client.least_loaded_node() in cluster.brokers
        first = client.cluster.updated_at
        time.sleep(0.3)
        client.maybe_refresh()  # older than metadata_max_age_ms
        assert client.cluster.updated_at > first
        again = client.cluster.updated_at
        client.maybe_refresh()  # fresh: no request
        assert client.cluster.updated_at == again
    finally:
        client.close()


def test_no_broker_available() -> None:
    client = KafkaClient(_config("127.0.0.1:1", socket_connection_setup_timeout_ms=500))
    try:
        with pytest.raises((errors.NoBrokersAvailableError, errors.KafkaTimeoutError)):
            client.refresh(timeout_s=1)
    finally:
        client.close()
