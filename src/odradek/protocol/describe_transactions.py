"""A reader for DescribeTransactionsResponse v0 that accepts Kafka's "no start time" (-1).

kio reads ``TransactionStartTimeMs`` as a datetime and refuses negative values,
but Kafka answers -1 for a transactional id with no transaction yet (Empty).
This reads the same bytes (the version is flexible: compact strings and arrays,
tagged fields) into kio's own entity types, with -1 as the instant 1 ms before
the epoch, which writes back as -1.
"""

from __future__ import annotations

import datetime
import struct

from kio.schema.describe_transactions.v0.response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)
from kio.schema.errors import ErrorCode

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        value = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return value

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def read_describe_transactions_v0(
    data: bytes, pos: int
) -> tuple[DescribeTransactionsResponse, int]:
    r = _Reader(data, pos)
    throttle = r.unpack(">i")
    states = []
    for _ in range(r.uvarint() - 1):
        error = r.unpack(">h")
        txn_id = r.string()
        state = r.string()
        timeout = r.unpack(">i")
        start = r.unpack(">q")
        producer_id = r.unpack(">q")
        epoch = r.unpack(">h")
        topics = []
        for _ in range(r.uvarint() - 1):
            topic = r.string()
            partitions = tuple(r.unpack(">i") for _ in range(r.uvarint() - 1))
            r.skip_tags()
            topics.append(TopicData(topic=topic, partitions=partitions))  # type: ignore[arg-type]
        r.skip_tags()
        states.append(
            TransactionState(
                error_code=ErrorCode(error),
                transactional_id=txn_id,  # type: ignore[arg-type]
                transaction_state=state,
                transaction_timeout=datetime.timedelta(milliseconds=timeout),  # type: ignore[arg-type]
                transaction_start_time=_EPOCH + datetime.timedelta(milliseconds=start),  # type: ignore[arg-type]
                producer_id=producer_id,  # type: ignore[arg-type]
                producer_epoch=epoch,  # type: ignore[arg-type]
                topics=tuple(topics),
            )
        )
    r.skip_tags()
    response = DescribeTransactionsResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle),  # type: ignore[arg-type]
        transaction_states=tuple(states),
    )
    return response, r.pos - pos
