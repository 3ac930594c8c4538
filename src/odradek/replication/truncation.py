"""Where a follower cuts its log after a leader change, as pure functions: testable
without a leader, a fetcher or etcd.

Before its first fetch under a new leader epoch a follower asks the leader where
its own latest epoch ends (OffsetForLeaderEpoch; from Fetch v12 the leader also
volunteers it, as a fetch response's ``DivergingEpoch``). What it holds past that
point is a suffix an old leader wrote that the new leader never had.

KIP-101's rule alone (cut only when the leader's end of our epoch is below our log
end) missed a leader answering with an *older* epoch than asked (it never had
ours): the follower kept records the leader does not have (issue 21, item 1).
``truncation_step`` is Kafka 4.1's full rule (KIP-279,
``AbstractFetcherThread.getOffsetTruncationState``): the follower looks the
leader's answer epoch up in its *own* epoch cache (``end_offset_for``, Kafka's
``LeaderEpochFileCache.endOffsetFor``). If its largest epoch at or below it is
that epoch, it cuts at the smaller of both ends and is done; if not (it never had
the leader's epoch), it cuts at its own end of that older epoch and asks again
about the latest epoch it has left, until the two logs agree.

``check_last_fetched_epoch`` is the leader's side of Fetch v12+ (KIP-320): a
follower names the epoch of its last fetched batch, and the leader answers a
``DivergingEpoch`` instead of records when the logs part there, so a divergence
found mid-epoch needs no separate OffsetForLeaderEpoch round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from odradek.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, end_offset_for
from odradek.protocol.errors import ErrorCode

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "DivergingEpoch",
    "TruncationStep",
    "check_last_fetched_epoch",
    "truncation_step",
]


@dataclass(frozen=True, slots=True)
class TruncationStep:
    """One answer's consequence (Kafka's ``OffsetTruncationState``).

    ``offset``: truncate the log to here; it may equal the log end (nothing to cut,
    but the epoch cache still drops entries starting there, as Kafka's
    ``UnifiedLog.truncateTo`` does: an epoch this broker led without writing) and
    may be below the log start (then the log is emptied and starts there, Kafka's
    ``truncateFullyAndStartAt``). ``complete``: False when the follower must ask
    the leader again about the latest epoch left in its cache after the cut.
    """

    offset: int
    complete: bool


def truncation_step(
    epochs: Sequence[tuple[int, int]],
    *,
    log_end: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> TruncationStep:
    """Where the follower truncates given the leader's answer about its latest epoch.

    ``epochs`` is the follower's epoch cache, ``(epoch, start offset)`` oldest
    first; ``leader_epoch`` and ``leader_end_offset`` are the leader's answer
    (OffsetForLeaderEpoch's ``leader_epoch`` / ``end_offset``, or a fetch response's
    ``DivergingEpoch``). The cases, in Kafka 4.1's order:

    * the leader knows no end offset: keep what is surely committed, up to the
      high watermark (Kafka uses the fetch state's initial offset, the high
      watermark for a follower);
    * the leader names no epoch (a pre-2.0 answer): cut at its end offset;
    * the follower's cache says nothing of the leader's epoch (it is empty, or the
      epoch is newer than all it knows): cut at the leader's end offset;
    * the follower's largest epoch at or below the leader's is the leader's
      epoch: cut at the smaller of the two ends of that epoch, done;
    * it is an older one (the follower never had the leader's epoch): cut at the
      follower's end of it, not done: ask again.

    Never past the log end.
    """
    if leader_end_offset == UNDEFINED_OFFSET:
        return TruncationStep(min(high_watermark, log_end), complete=True)
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationStep(min(leader_end_offset, log_end), complete=True)
    own_epoch, own_end = end_offset_for(epochs, leader_epoch, log_end)
    if own_end == UNDEFINED_OFFSET:
        return TruncationStep(min(leader_end_offset, log_end), complete=True)
    if own_epoch != leader_epoch:
        return TruncationStep(min(own_end, log_end), complete=False)
    return TruncationStep(min(own_end, leader_end_offset, log_end), complete=True)


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """A Fetch response's ``DivergingEpoch`` (v12+): the leader's end of the largest
    epoch it has at or below the follower's last fetched one. The follower treats it
    as an OffsetForLeaderEpoch answer (``truncation_step``)."""

    epoch: int
    end_offset: int


def check_last_fetched_epoch(
    epochs: Sequence[tuple[int, int]],
    *,
    log_start: int,
    log_end: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> ErrorCode | DivergingEpoch | None:
    """The leader's check of a follower's Fetch (KIP-320, Kafka 4.1's
    ``Partition.readRecords``) over the leader's epoch cache ``epochs``: None when
    the follower's log agrees up to ``fetch_offset`` (read on), a `DivergingEpoch`
    (answered with no records) when the leader's largest epoch at or below
    ``last_fetched_epoch`` is older or ends before ``fetch_offset``,
    OFFSET_OUT_OF_RANGE when the leader cannot place that epoch or the offset is
    below its log start. ``last_fetched_epoch`` -1: not sent, nothing to check."""
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    epoch, end = end_offset_for(epochs, last_fetched_epoch, log_end)
    if epoch == UNDEFINED_EPOCH or end == UNDEFINED_OFFSET or fetch_offset < log_start:
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if epoch < last_fetched_epoch or end < fetch_offset:
        return DivergingEpoch(epoch, end)
    return None
