"""Finding where a follower's log diverges from the leader's, by leader epoch (KIP-320).

Two pure functions, one per side of a replica fetch:

- the leader checks the follower's claimed position (`fetch_offset`, `last_fetched_epoch`)
  against its own epoch cache and, when they disagree, answers with the diverging epoch
  and its end offset instead of records (Kafka's Partition.readRecords);
- the follower turns that answer into an offset to truncate to, possibly in several rounds
  (Kafka's AbstractFetcherThread.getOffsetTruncationState).

Records with the same leader epoch at the same offset are the same record, since each epoch
has one leader and it alone writes that epoch; so comparing epochs finds the longest common
prefix of the two logs. After truncating, the follower must always call
`cache.truncate_from_end(offset)`, even when the log itself is unchanged: an epoch it assigned
as a leader but never wrote to is what the next round would otherwise keep reporting.
"""

from __future__ import annotations

from broker.protocol.errors import ApiError, ErrorCode
from broker.log.epochs import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


def check_fetch_position(
    cache: LeaderEpochCache, log_end_offset: int, fetch_offset: int, last_fetched_epoch: int
) -> tuple[int, int] | None:
    """Leader side: the diverging (epoch, end_offset) for a follower fetch, or None to serve it.

    - `last_fetched_epoch` < 0 (the follower has no epoch yet): None, nothing to check.
    - the leader cannot place the epoch (endOffsetFor is undefined: the follower claims an
      epoch above the leader's latest, or the leader's cache is empty): ApiError
      OFFSET_OUT_OF_RANGE, as Kafka does; the follower then resets from the leader's offsets.
    - the largest leader epoch <= `last_fetched_epoch` is lower than it (the leader never saw
      that epoch), or that epoch ends below `fetch_offset` in the leader's log: diverging.

    The caller checks `fetch_offset` against the log start offset first (OFFSET_OUT_OF_RANGE
    regardless of divergence), as Kafka does.
    """
    if last_fetched_epoch < 0:
        return None
    epoch, end_offset = cache.end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_EPOCH_OFFSET:
        raise ApiError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"could not determine the end offset of the last fetched epoch {last_fetched_epoch}",
        )
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def truncation_offset(
    follower_cache: LeaderEpochCache,
    follower_leo: int,
    leader_epoch: int,
    leader_end_offset: int,
    *,
    high_watermark: int,
) -> tuple[int, bool]:
    """Follower side: (offset to truncate to, whether truncation is complete) for the leader's
    answer (`leader_epoch`, `leader_end_offset`). The offset never exceeds `follower_leo`.

    Cases, in Kafka's order:
    - UNDEFINED_EPOCH_OFFSET from the leader (it could not place the epoch): truncate to the
      follower's `high_watermark`, complete.
    - UNDEFINED_EPOCH with a defined offset (pre-KIP-279 leader): truncate to the leader's
      offset, complete.
    - the follower's own endOffsetFor(leader_epoch) is undefined (it tracks no epoch at or
      around it, e.g. an empty cache): truncate to the leader's offset, complete.
    - the follower's largest epoch <= leader_epoch is not leader_epoch (the follower never
      saw that epoch): truncate to where the follower's next higher epoch starts, not
      complete -- ask again with the follower's new latest epoch (KIP-279's extra rounds).
    - both know leader_epoch: truncate to the lower of the two end offsets, complete.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(high_watermark, follower_leo), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, follower_leo), True
    follower_epoch, follower_end_offset = follower_cache.end_offset_for(leader_epoch, follower_leo)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        return min(leader_end_offset, follower_leo), True
    if follower_epoch != leader_epoch:
        return min(follower_end_offset, follower_leo), False
    return min(follower_end_offset, leader_end_offset, follower_leo), True
