"""TxnOffsetCommit (API 28): a transactional producer commits a group's offsets inside its
transaction (after AddOffsetsToTxn). The group coordinator writes them to the group's
`__consumer_offsets` partition as a transactional batch of the producer; they become the
group's committed offsets only when the transaction's COMMIT marker is written there, and
are dropped by an ABORT marker (groups/shard.py). Versions 0-3 (3: the consumer's member id
and generation, KIP-447); 4 only adds TRANSACTION_ABORTABLE, 5 (KIP-890 part 2) is not
advertised."""

from __future__ import annotations

from kafka.protocol.producer import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from ..context import HandlerContext
from ..groups.membership import UNKNOWN_MEMBER_ID
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

_Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_Partition = _Topic.TxnOffsetCommitResponsePartition


@api(ApiKey.TXN_OFFSET_COMMIT, versions=(0, 4))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    version = header.api_version
    entries = []
    for topic_request in request.topics:
        topic = ctx.catalog.get(topic_request.name)
        for p in topic_request.partitions:
            entries.append(
                (
                    topic,
                    topic_request.name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch if version >= 2 else -1,
                    p.committed_metadata,
                )
            )
    try:
        codes = await ctx.groups.txn_commit_offsets(
            request.group_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            member_id=request.member_id if version >= 3 else UNKNOWN_MEMBER_ID,
            group_instance_id=request.group_instance_id if version >= 3 else None,
            generation_id=request.generation_id if version >= 3 else -1,
            offsets=entries,
        )
    except ApiError as exc:
        codes = [exc.code] * len(entries)
    codes_iter = iter(codes)
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            _Topic(
                name=t.name,
                partitions=[
                    _Partition(partition_index=p.partition_index, error_code=next(codes_iter)) for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
