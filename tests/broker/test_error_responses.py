"""A failing handler answers with an error code and the connection stays open.

Kafka answers a request whose handler threw with ``request.getErrorResponse(e)``
(UNKNOWN_SERVER_ERROR on what the request named) and closes the connection only for
a Produce with acks=0 (RequestHandlerHelper.sendErrorOrCloseConnection). Every API in
Odradek's registry, at every version it reads, is checked against a handler that
raises: the answer is read by Odradek's decoder and by kafka-python's, carries the
error, and the same connection serves the next request.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import kafka.protocol
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.api_header import ResponseClassRegistry

from odradek.broker.config import BrokerConfig
from odradek.broker.registry import REGISTRY
from odradek.broker.server import Broker, run_broker
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, decode_response, encode_request, request_type
from odradek.protocol.error_response import answer_version

from .sample_requests import error_codes, sample_entity
from .wire import WireClient

UNKNOWN_SERVER_ERROR = -1
# These answer, then close: an authentication that failed half-way cannot go on.
ANSWER_THEN_CLOSE = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def _kafka_python_responses() -> dict[int, Any]:
    """kafka-python's response classes by API key (registered as its modules load)."""
    for module in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
        importlib.import_module(module.name)
    return dict(ResponseClassRegistry._response_class_registry)


KAFKA_PYTHON = _kafka_python_responses()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker in this process (its handlers can be swapped), on a loop of its own."""
    data = Path(tmp_path_factory.mktemp("errors"))
    ready = threading.Event()
    held: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            held["broker"] = Broker(data, BrokerConfig(), port=0)
            held["stop"], held["loop"] = asyncio.Event(), asyncio.get_running_loop()
            serving = asyncio.create_task(run_broker(held["broker"], held["stop"]))
            while not held["broker"]._started and not serving.done():
                await asyncio.sleep(0.01)
            ready.set()
            await serving

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(30), "the broker did not start"
    yield held["broker"]
    held["loop"].call_soon_threadsafe(held["stop"].set)
    thread.join(30)


def _failing(ctx: Any, body: Any) -> Any:
    raise RuntimeError("a handler bug")


def _fail_handler(monkeypatch: pytest.MonkeyPatch, key: int) -> None:
    monkeypatch.setitem(REGISTRY, key, replace(REGISTRY[key], handler=_failing, is_async=False))


def _exchange(client: WireClient, key: int, version: int, body: Any) -> bytes:
    client.correlation += 1
    client.send_raw(encode_request(RequestHeader(key, version, client.correlation, "errors"), body))
    return client.read_frame()


def _still_serves(client: WireClient, failing: int = -1) -> None:
    """The connection answers a request of another API."""
    if failing == ApiKey.API_VERSIONS:
        metadata = client.request(
            ApiKey.METADATA,
            12,
            {
                "topics": [],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        assert metadata.brokers
        return
    versions = client.request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert int(versions.error_code) == 0 and versions.api_keys


@pytest.mark.parametrize("key", sorted(REGISTRY), ids=lambda k: ApiKey(k).name)
def test_a_failing_handler_answers_every_version_with_an_error_code(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, key: int
) -> None:
    spec = REGISTRY[key]
    _fail_handler(monkeypatch, key)
    bootstrap = f"127.0.0.1:{broker.port}"
    reader = KAFKA_PYTHON.get(key)
    with WireClient(bootstrap, 10) as client:
        for version in range(spec.parse_from, spec.max_version + 1):
            request = sample_entity(request_type(key, version))
            frame = _exchange(client, key, version, request)
            correlation, answer = decode_response(key, answer_version(key, version), frame)
            assert correlation == client.correlation
            codes = {code for _path, code in error_codes(answer)}
            assert codes <= {0, UNKNOWN_SERVER_ERROR}, (version, answer)
            if not (key == ApiKey.DESCRIBE_LOG_DIRS and version < 3):
                # DescribeLogDirs v1-2 has no error field the request can fill (its
                # results are per log directory): Kafka's answer is empty too.
                assert UNKNOWN_SERVER_ERROR in codes, (version, answer)
            if reader is not None and version <= reader.max_version:
                decoded = reader[version].decode(frame, header=True)
                assert decoded.header.correlation_id == client.correlation
            if key in ANSWER_THEN_CLOSE:
                with pytest.raises(ConnectionError):
                    _still_serves(client, key)
                client.close()
                client.__init__(bootstrap, 10)  # type: ignore[misc]
            else:
                _still_serves(client, key)  # the same connection goes on
    with WireClient(bootstrap, 10) as fresh:
        _still_serves(fresh, key)


def test_kafka_python_reads_every_api_odradek_answers_but_two() -> None:
    """The decoders above cover every API except KIP-848's two, which kafka-python lacks
    (Odradek's own decoder reads those)."""
    missing = {ApiKey(k).name for k in REGISTRY if k not in KAFKA_PYTHON}
    assert missing == {"CONSUMER_GROUP_HEARTBEAT", "CONSUMER_GROUP_DESCRIBE"}


def test_a_produce_with_acks_0_whose_handler_fails_closes_its_connection(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's one null error response: the producer reads no answer, so the closed
    connection is what tells it."""
    _fail_handler(monkeypatch, ApiKey.PRODUCE)
    bootstrap = f"127.0.0.1:{broker.port}"
    request = replace(sample_entity(request_type(ApiKey.PRODUCE, 9)), acks=0)
    with WireClient(bootstrap, 10) as client:
        client.send_raw(encode_request(RequestHeader(ApiKey.PRODUCE, 9, 1, "errors"), request))
        with pytest.raises(ConnectionError):
            client.read_frame()
    with WireClient(bootstrap, 10) as fresh:
        _still_serves(fresh)


def test_confluent_kafka_sees_the_error_and_keeps_its_connection(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_handler(monkeypatch, ApiKey.CREATE_TOPICS)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    futures = admin.create_topics([NewTopic("fails", 1, 1)], request_timeout=10)
    with pytest.raises(KafkaException) as failed:
        futures["fails"].result(timeout=15)
    assert failed.value.args[0].code() == KafkaError.UNKNOWN
    # The same client goes on: its broker connection was not dropped.
    assert admin.list_topics(timeout=10).brokers
