"""COORDINATES payloads and commit messages: round trips, and versions a broker does not know."""

from __future__ import annotations

import uuid

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.wal.commit import COMMIT_VERSION, CommitBatch, CommitPartition, CommitRequest
from broker.log.coordinates import InvalidCoordinates, WalRef, WalRefFormatError, decode_ref, encode_ref, make_ref
from broker.protocol.errors import ApiError, ErrorCode
from walfiles.keys import format_wal_id

object_ids = st.builds(format_wal_id, st.integers(0, 10**13 - 1), st.integers(0, 2**31 - 1), st.integers(0, 10**10 - 1))


@given(object_ids, st.integers(0, 2**40), st.integers(1, 2**31))
def test_ref_round_trip(object_id: str, offset: int, length: int) -> None:
    ref = make_ref(object_id, offset, length)
    assert decode_ref(encode_ref(ref)) == ref
    assert len(encode_ref(ref)) < 64, "entries stay small: about 120 bytes with the header"


def test_unknown_version_and_garbage_are_rejected_with_a_clear_error() -> None:
    with pytest.raises(WalRefFormatError, match="version 2 is not supported"):
        decode_ref(encode_ref(WalRef(2, "x", 0, 1)))
    with pytest.raises(WalRefFormatError, match="unreadable"):
        decode_ref(b"\xff\x00garbage")
    with pytest.raises(WalRefFormatError, match="bad range"):
        decode_ref(encode_ref(WalRef(1, "x", 0, 0)))


@pytest.mark.parametrize("offset, length", [(-1, 10), (0, -1), (-5, -5), (0, 0), (-(2**40), 1)])
def test_negative_coordinates_are_rejected_when_read_and_never_made(offset: int, length: int) -> None:
    """A COORDINATES payload with a negative offset or a length below 1 names no batch: the
    reader says so (naming the object and both numbers), and make_ref, which the leader's
    commit path uses, refuses to build one, so none reaches a log."""
    with pytest.raises(WalRefFormatError, match=rf"WAL object x has a bad range: offset {offset} .*length {length}"):
        decode_ref(encode_ref(WalRef(1, "x", offset, length)))
    with pytest.raises(InvalidCoordinates, match=rf"offset {offset} .*length {length}") as info:
        make_ref("x", offset, length)
    assert isinstance(info.value, ApiError) and info.value.code == ErrorCode.CORRUPT_MESSAGE


@given(st.integers(-(2**40), 2**40), st.integers(-(2**31), 2**31))
def test_a_range_is_accepted_exactly_when_it_can_hold_a_batch(offset: int, length: int) -> None:
    valid = offset >= 0 and length >= 1
    raw = encode_ref(WalRef(1, "obj", offset, length))
    try:
        ref = decode_ref(raw)
    except WalRefFormatError:
        assert not valid
    else:
        assert valid and (ref.offset, ref.length) == (offset, length)
    try:
        make_ref("obj", offset, length)
    except InvalidCoordinates:
        assert not valid
    else:
        assert valid


def test_commit_request_survives_msgpack() -> None:
    request = CommitRequest(
        COMMIT_VERSION,
        format_wal_id(1, 2, 3),
        [
            CommitPartition(
                uuid.uuid4(), 7, -1, [CommitBatch(bytes(61), 8, 100), CommitBatch(b"\x01" * 61, 108, 50)], 12
            )
        ],
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=CommitRequest) == request
