"""Produce: validate and append each partition's batches; per-partition error codes.

With acks=0 the client reads no response, so a failed partition closes the connection
(as Kafka does) to make the client notice and refresh its metadata.
"""

from __future__ import annotations

from kafka.protocol.producer import ProduceResponse

from ..dispatch import ConnectionFault
from ..protocol.errors import ApiError, ErrorCode
from .common import resolve_topic
from .registry import api

_Topic = ProduceResponse.TopicProduceResponse
_Partition = _Topic.PartitionProduceResponse


@api(0)
async def handle(broker, header, request):  # type: ignore[no-untyped-def]
    acks = request.acks
    metrics = broker.metrics
    topics = []
    failed = False
    for topic_data in request.topic_data:
        results = []
        try:
            topic = resolve_topic(broker, topic_data.name, topic_data.topic_id)
        except ApiError as exc:
            topic, topic_error = None, exc
        for data in topic_data.partition_data:
            try:
                if acks not in (0, 1, -1):
                    raise ApiError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}")
                if request.transactional_id is not None:
                    raise ApiError(ErrorCode.INVALID_TXN_STATE, "transactions are not supported yet")
                if topic is None:
                    raise topic_error
                partition = broker.replicas.get(topic.name, data.index)
                records = data.records
                outcome = partition.append_records(memoryview(records if records is not None else b""), acks)
            except ApiError as exc:
                failed = True
                metrics.produce_errors.labels(exc.code.name).inc()
                results.append(_Partition(index=data.index, error_code=exc.code, base_offset=-1,
                                          log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                          error_message=exc.message))
                continue
            if outcome.appended_bytes:
                metrics.produced_bytes.inc(outcome.appended_bytes)
            results.append(_Partition(index=data.index, error_code=0, base_offset=outcome.base_offset,
                                      log_append_time_ms=outcome.log_append_time_ms,
                                      log_start_offset=outcome.log_start_offset, record_errors=[],
                                      error_message=None))
        topics.append(_Topic(name=topic_data.name, topic_id=topic_data.topic_id, partition_responses=results))
    if acks == 0:
        if failed:
            raise ConnectionFault("acks=0 produce failed for at least one partition")
        return None
    return ProduceResponse(responses=topics, throttle_time_ms=0)
