"""The client's side of fetch sessions (KIP-227), one per broker: Java's FetchSessionHandler.

The first Fetch to a broker is full and asks for a session (id 0, epoch 0).
When the broker answers with a session id, later fetches are incremental: they
list only partitions that are new or whose fetch offset or size changed, and
name those dropped since (``forgotten_topics_data``); the broker fetches the
rest as it remembers them and answers only partitions that changed.

* FETCH_SESSION_ID_NOT_FOUND: the broker forgot the session (evicted, or a
  restart): the next fetch is full and opens a new one.
* Any other session error (INVALID_FETCH_SESSION_EPOCH, ...), a failed request
  or a lost connection: the next fetch is full and closes the old session
  while opening a new one (its id, epoch 0).
* A broker that answers a full fetch with session id 0 has no room for a
  session, or no sessions at all (tansu; any broker before Fetch v7): every
  fetch stays full, which is what fetching without sessions is.

Pure state; the fetcher builds the request from ``build()`` and reports back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from odradek.client.structs import TopicPartition
from odradek.protocol.errors import ErrorCode

__all__ = ["FetchRequestData", "FetchSessionHandler", "PartitionFetch"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
SESSIONS_FROM_VERSION = 7


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What one partition asks for: the Fetch request's per-partition fields."""

    fetch_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    to_send: dict[TopicPartition, PartitionFetch]  # the request's partitions
    to_forget: list[TopicPartition]  # forgotten_topics_data
    session_partitions: dict[TopicPartition, PartitionFetch]  # every partition fetched
    session_id: int
    epoch: int

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def _next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


class FetchSessionHandler:
    """Fetch session state for one broker."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH  # of the next request
        self._partitions: dict[TopicPartition, PartitionFetch] = {}  # as the broker has them

    def build(
        self, wanted: Mapping[TopicPartition, PartitionFetch], version: int
    ) -> FetchRequestData:
        """The next request for ``wanted`` (every partition to fetch from this broker now)."""
        if version < SESSIONS_FROM_VERSION:
            self.session_id, self.epoch = 0, INITIAL_EPOCH
            return FetchRequestData(dict(wanted), [], dict(wanted), 0, FINAL_EPOCH)
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._partitions = dict(wanted)
            return FetchRequestData(dict(wanted), [], dict(wanted), self.session_id, self.epoch)
        previous = self._partitions
        to_send = {tp: want for tp, want in wanted.items() if previous.get(tp) != want}
        to_forget = [tp for tp in previous if tp not in wanted]
        self._partitions = dict(wanted)
        return FetchRequestData(to_send, to_forget, dict(wanted), self.session_id, self.epoch)

    def handle_response(self, request: FetchRequestData, error_code: int, session_id: int) -> bool:
        """Account for the response to ``request``; False when it cannot be used (an error)."""
        if request.epoch == FINAL_EPOCH and request.session_id == 0:
            return error_code == ErrorCode.NONE  # no sessions (Fetch < v7)
        if error_code:
            if error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id, self.epoch = 0, INITIAL_EPOCH
            else:
                self.epoch = INITIAL_EPOCH  # close the session and open a new one
            return False
        if request.full or session_id == 0:
            # A new session (or none: the broker keeps none for us; try again next time).
            self.session_id = session_id
            self.epoch = _next_epoch(INITIAL_EPOCH) if session_id else INITIAL_EPOCH
        else:
            self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (connection lost, timeout): the next fetch is full."""
        self.epoch = INITIAL_EPOCH
