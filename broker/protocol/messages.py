"""Typed request decoding and response encoding over kafka-python's schema classes.

kafka-python 3.x generates compiled encoders/decoders from Apache Kafka's JSON message
schemas; this module picks the classes for an API key and does the framing around them.
No I/O here.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

from .api_keys import ApiKey
from .encoded import EncodedBody
from .header import RequestHeader, encode_response_header
from .nulls import checker

_PAIRS = (
    (ProduceRequest, ProduceResponse),
    (FetchRequest, FetchResponse),
    (ListOffsetsRequest, ListOffsetsResponse),
    (MetadataRequest, MetadataResponse),
    (FindCoordinatorRequest, FindCoordinatorResponse),
    (ApiVersionsRequest, ApiVersionsResponse),
    (CreateTopicsRequest, CreateTopicsResponse),
    (DeleteTopicsRequest, DeleteTopicsResponse),
    (DeleteRecordsRequest, DeleteRecordsResponse),
    (InitProducerIdRequest, InitProducerIdResponse),
    (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    (DescribeConfigsRequest, DescribeConfigsResponse),
    (AlterConfigsRequest, AlterConfigsResponse),
    (CreatePartitionsRequest, CreatePartitionsResponse),
    (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    (DescribeClusterRequest, DescribeClusterResponse),
    (DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse),
    (JoinGroupRequest, JoinGroupResponse),
    (SyncGroupRequest, SyncGroupResponse),
    (HeartbeatRequest, HeartbeatResponse),
    (LeaveGroupRequest, LeaveGroupResponse),
    (OffsetCommitRequest, OffsetCommitResponse),
    (OffsetFetchRequest, OffsetFetchResponse),
    (ListGroupsRequest, ListGroupsResponse),
    (DescribeGroupsRequest, DescribeGroupsResponse),
    (DeleteGroupsRequest, DeleteGroupsResponse),
    (OffsetDeleteRequest, OffsetDeleteResponse),
    (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    (EndTxnRequest, EndTxnResponse),
    (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    (DescribeProducersRequest, DescribeProducersResponse),
    (DescribeTransactionsRequest, DescribeTransactionsResponse),
    (ListTransactionsRequest, ListTransactionsResponse),
)
REQUEST_CLASSES: dict[int, Any] = {req.API_KEY: req for req, _ in _PAIRS}
RESPONSE_CLASSES: dict[int, Any] = {req.API_KEY: resp for req, resp in _PAIRS}


def schema_versions(api_key: int) -> tuple[int, int]:
    """The version range Kafka's schema defines for an API (what a handler may claim)."""
    return REQUEST_CLASSES[api_key].valid_versions


def is_flexible(api_key: int, api_version: int) -> bool:
    return REQUEST_CLASSES[api_key].flexible_version_q(api_version)


def decode_request(api_key: int, api_version: int, frame: bytes | memoryview, body_offset: int) -> Any:
    """Decode a request body; raises on malformed input (the caller closes the connection),
    including a null where the schema does not allow one."""
    cls = REQUEST_CLASSES[api_key]
    request = cls.decode(memoryview(frame)[body_offset:], version=api_version)
    checker(cls, api_version)(request)
    return request


def encode_response(header: RequestHeader, response: Any) -> list[bytes | bytearray]:
    """Response header + body for `header`'s API and version, unframed (a body the handler
    encoded itself passes through)."""
    flexible = is_flexible(header.api_key, header.api_version) and header.api_key != ApiKey.API_VERSIONS
    head = encode_response_header(header.correlation_id, flexible)
    if isinstance(response, EncodedBody):
        return [head, *response.parts]
    return [head, response.encode(version=header.api_version)]
