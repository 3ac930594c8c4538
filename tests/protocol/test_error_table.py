"""The one table of Kafka error codes agrees with Kafka's, as kio generates it from Kafka."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as KioErrorCode

from odradek.protocol.errors import ErrorCode, name_of


def test_every_kafka_code_is_in_the_table_with_its_name_and_retriability() -> None:
    for kafka in KioErrorCode:
        ours = ErrorCode(int(kafka))
        assert ours.name == kafka.name.upper()
        assert ours.retriable is kafka.retriable
    assert len(ErrorCode) == len(KioErrorCode)


def test_codes_are_ints_on_the_wire_and_carry_kafkas_message() -> None:
    assert ErrorCode.NOT_COORDINATOR == 16
    assert isinstance(ErrorCode.NOT_COORDINATOR, int)
    assert ErrorCode.NOT_COORDINATOR.retriable
    assert ErrorCode.NOT_COORDINATOR.message == "This is not the correct coordinator."
    assert all(e.message for e in ErrorCode if e is not ErrorCode.NONE)


def test_a_code_newer_than_the_table_is_named_not_raised() -> None:
    assert ErrorCode.known(3) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert ErrorCode.known(999) is None
    assert name_of(999) == "ERROR_999"
    assert name_of(-1) == "UNKNOWN_SERVER_ERROR"
