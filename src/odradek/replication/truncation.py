"""Where a follower cuts its log after a leader change (Kafka's KIP-101 rule), as a pure
function: testable without a leader, a fetcher or etcd.

Before its first fetch under a new leader epoch a follower asks the leader where
its own latest epoch ends (OffsetForLeaderEpoch). What it holds past that point
is a suffix an old leader wrote that the new leader never had. (Issue 21 refines
the rule with KIP-279: the largest epoch both logs share, asked again until they
agree.)
"""

from __future__ import annotations

UNDEFINED_EPOCH = -1


def divergence_offset(
    *,
    latest_epoch: int,
    log_start: int,
    log_end: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> int | None:
    """The offset to truncate the follower's log to, or None when nothing diverged.

    ``latest_epoch`` is the newest epoch in the follower's epoch cache (what it
    asked about); ``leader_epoch`` and ``leader_end_offset`` are the leader's answer
    (UNDEFINED_EPOCH and -1 when the leader knows nothing that old).
    """
    if latest_epoch == UNDEFINED_EPOCH:
        return None  # nothing of ours carries an epoch: nothing can diverge
    if leader_epoch == UNDEFINED_EPOCH or leader_end_offset < 0:
        # The leader has nothing of our epoch: keep only what is surely committed.
        cut = min(high_watermark, log_end)
    elif leader_end_offset < log_end:
        cut = leader_end_offset
    else:
        return None
    cut = max(cut, log_start)
    return cut if cut < log_end else None
