"""Leader-epoch fencing (KIP-320), the one check Fetch, ListOffsets, OffsetForLeaderEpoch and
replica fetches make."""

from __future__ import annotations

import pytest

from broker.protocol.errors import ApiError, ErrorCode
from broker.reads.fencing import check_leader_epoch


@pytest.mark.parametrize("asked", [5, -1, -2])
def test_the_current_epoch_or_none_passes(asked: int) -> None:
    check_leader_epoch(asked, 5)


@pytest.mark.parametrize(
    "asked, code",
    [(4, ErrorCode.FENCED_LEADER_EPOCH), (0, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH)],
)
def test_an_older_epoch_is_fenced_and_a_newer_one_unknown(asked: int, code: ErrorCode) -> None:
    with pytest.raises(ApiError) as raised:
        check_leader_epoch(asked, 5)
    assert raised.value.code == code
