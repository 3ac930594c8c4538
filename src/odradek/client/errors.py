"""Client errors, named after Kafka's exceptions (``XyzException`` becomes ``XyzError``).

Every error the broker can return has a class here: ``error_for_code(code)``
gives it, ``make_error(code)`` makes one. Each class carries the Kafka error
``code`` and whether the client may retry (``retriable``), both taken from
Odradek's one table of Kafka's errors (``odradek.protocol.errors.ErrorCode``),
the table the broker answers from.

Classes the client itself raises or catches are written out below (their code
from the table, their retriability set from it at import) so type checkers and
readers see them; the rest are generated from the table, named after it
(``NOT_COORDINATOR`` becomes ``NotCoordinatorError``), and are reachable as
module attributes and through ``error_for_code``.
"""

from __future__ import annotations

from typing import ClassVar

from odradek.protocol.errors import ErrorCode


class KafkaError(Exception):
    """Base of every client error. ``code`` is Kafka's error code (-1 when client-side)."""

    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else self.__class__.__name__)
        self.message = message


# --------------------------------------------------------------------- client-side errors


class KafkaConnectionError(KafkaError):
    """The connection to a broker failed or was closed with requests in flight."""

    retriable = True


class KafkaTimeoutError(KafkaError):
    """A request or an operation did not complete in time (Java's TimeoutException)."""

    retriable = True


class ConfigError(KafkaError, ValueError):
    """An unknown setting or a bad value (Java's ConfigException)."""


class IllegalStateError(KafkaError):
    """An operation that the client's current state does not allow."""


class NoBrokersAvailableError(KafkaError):
    """None of the bootstrap servers could be reached."""

    retriable = True


class IncompatibleBrokerVersionError(KafkaError):
    """The broker supports no version of an API the client needs."""


class SerializationError(KafkaError):
    """A key or value could not be turned into bytes."""


class RecordTooLargeError(KafkaError):
    """A record exceeds ``max_request_size`` or ``buffer_memory`` (client-side check)."""


class CorruptRecordError(KafkaError):
    """A fetched record batch failed to decode (bad CRC, bad compression, truncation)."""

    code = ErrorCode.CORRUPT_MESSAGE


# --------------------------------------------------------------------- broker errors


class BrokerResponseError(KafkaError):
    """An error code returned by a broker."""


_BY_CODE: dict[int, type[BrokerResponseError]] = {}


def _class_name(name: str) -> str:
    """The table's ``INVALID_TOPIC_EXCEPTION`` becomes ``InvalidTopicError``."""
    name = name.lower()
    for suffix in ("_exception", "_error"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


def _register(cls: type[BrokerResponseError]) -> type[BrokerResponseError]:
    _BY_CODE[cls.code] = cls
    return cls


class UnknownServerError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(BrokerResponseError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class UnknownTopicOrPartitionError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(BrokerResponseError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(BrokerResponseError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(BrokerResponseError):
    code = ErrorCode.REQUEST_TIMED_OUT


class MessageTooLargeError(BrokerResponseError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class CoordinatorNotAvailableError(BrokerResponseError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class NotCoordinatorError(BrokerResponseError):
    code = ErrorCode.NOT_COORDINATOR


class InvalidTopicError(BrokerResponseError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class UnsupportedVersionError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_VERSION


class TopicAlreadyExistsError(BrokerResponseError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(BrokerResponseError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(BrokerResponseError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidConfigError(BrokerResponseError):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(BrokerResponseError):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(BrokerResponseError):
    code = ErrorCode.INVALID_REQUEST


class OutOfOrderSequenceNumberError(BrokerResponseError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(BrokerResponseError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(BrokerResponseError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(BrokerResponseError):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class GroupMaxSizeReachedError(BrokerResponseError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class FencedInstanceIdError(BrokerResponseError):
    code = ErrorCode.FENCED_INSTANCE_ID


class UnsupportedCompressionTypeError(BrokerResponseError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(BrokerResponseError):
    code = ErrorCode.INVALID_RECORD


class ProducerFencedError(BrokerResponseError):
    code = ErrorCode.PRODUCER_FENCED


for _cls in list(BrokerResponseError.__subclasses__()):
    _register(_cls)

# Generate the remaining classes from the table, with its retriable flags. Codes
# defined above keep their class but take the table's flag, so both agree.
for _member in ErrorCode:
    if _member is ErrorCode.NONE:
        continue
    _existing = _BY_CODE.get(_member)
    if _existing is not None:
        _existing.retriable = _member.retriable
        continue
    _name = _class_name(_member.name)
    _generated = type(
        _name,
        (BrokerResponseError,),
        {
            "code": _member,
            "retriable": _member.retriable,
            "__doc__": f"Kafka error {int(_member)} ({_member.name}): {_member.message}",
            "__module__": __name__,
        },
    )
    _register(_generated)
    globals()[_name] = _generated


# Errors that say the client's metadata is out of date: refresh it and retry at the
# (new) leader. Java's InvalidMetadataException family, with UNKNOWN_LEADER_EPOCH.
STALE_METADATA = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
    }
)
# The coordinator moved or is not up: look it up again.
COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


def error_for_code(code: int) -> type[BrokerResponseError]:
    """The error class for a Kafka error code (UnknownServerError for unknown codes)."""
    return _BY_CODE.get(int(code), UnknownServerError)


def make_error(code: int, message: str | None = None) -> BrokerResponseError:
    """An instance of the error for ``code``, with Kafka's name in the message."""
    cls = error_for_code(code)
    text = f"[Error {int(code)}] {cls.__name__}"
    if message:
        text += f": {message}"
    return cls(text)


# --------------------------------------------------------------------- commit errors


class CommitFailedError(KafkaError):
    """The commit cannot be completed: the member is no longer part of the group.

    As in Java, this happens when the consumer was kicked out (ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID, typically after ``max_poll_interval_ms`` passed between polls) or
    when it is not part of an active group; call ``poll`` to rejoin.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "Commit cannot be completed since the group has already rebalanced and assigned "
            "the partitions to another member. This means that the time between subsequent "
            "calls to poll() was longer than the configured max_poll_interval_ms, which "
            "typically implies that the poll loop is spending too much time processing "
            "messages. You can address this either by increasing max_poll_interval_ms or by "
            "reducing the maximum size of batches returned in poll() with max_poll_records."
        )


class RebalanceInProgressCommitError(error_for_code(ErrorCode.REBALANCE_IN_PROGRESS)):  # type: ignore[misc]
    """The commit failed because the group is rebalancing (Java's RebalanceInProgressException).

    Not a ``CommitFailedError``: the member is still in the group. Retriable, but only
    after a ``poll`` has finished the rebalance, so ``commit()`` raises it at once instead
    of retrying by itself; commit again after the next ``poll`` (the partitions a
    cooperative rebalance takes away are handed to ``on_partitions_revoked`` first).
    """

    retriable = True


class RetriableCommitFailedError(KafkaError):
    """An asynchronous commit failed with a retriable error (handed to the callback)."""

    retriable = True


def retriable_without_poll(error: BaseException | None) -> bool:
    """Whether retrying the same request may succeed without a ``poll`` in between."""
    return (
        isinstance(error, KafkaError)
        and error.retriable
        and not isinstance(error, RebalanceInProgressCommitError)
    )
