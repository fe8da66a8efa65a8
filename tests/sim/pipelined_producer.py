"""librdkafka's idempotent producer as far as once-ness and order go: several batches of a
partition in flight at once, and its answer to OUT_OF_ORDER_SEQUENCE_NUMBER
(`rd_kafka_handle_idempotent_Produce_error` in rdkafka_request.c).

The single-batch producer of workload.py (`produce_idempotent`) never has a later batch in
flight while an earlier one is unresolved, so it cannot see what pipelining relies on: when
the leader refuses batch N+1 as out of sequence, batch N is not in the log and will never be
(Kafka's leader appends a connection's requests in order and never after answering them).
librdkafka trusts exactly that. It waits for every request in flight to answer ("drain"),
bumps the producer epoch locally and sends every unacknowledged message again from sequence
0; had N landed after all, it would now be in the log twice, the second copy after N+1.

Per partition: messages in order, each sent as one batch, up to MAX_IN_FLIGHT in flight, all
to one broker: when the partition's leader (here its representative) changes, nothing goes to
the new one until every request to the old one has answered ("wait for outstanding requests
to finish before producing to new leader", rdkafka_broker.c); a retriable error or a lost
connection sends the same (epoch, sequence) again once nothing of the partition is in flight
(rd_kafka_idemp_drain_toppar); success or DUPLICATE_SEQUENCE_NUMBER
acknowledges the message and every earlier one still unacknowledged (rd_kafka_dr_implicit_ack:
in sequence order, a later batch lands only after the earlier ones). OUT_OF_ORDER with a sequence past the next one to be
acknowledged is the drain-and-bump case; at or below it librdkafka raises a fatal error
("sequence desynchronization"), which the ledger records as a violation. The auditor's
idempotent checks (each message at most once, in message order) then hold the broker to it.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Any

from broker.protocol.errors import RETRIABLE, ErrorCode

from .cluster import SimCluster
from .determinism import SimRandom
from .kafka import ConnectionLost
from .workload import (
    AMBIGUOUS_ERRORS,
    MAX_IN_FLIGHT,
    PRODUCE_V,
    REFRESH_ERRORS,
    Attempt,
    Connections,
    Key,
    Ledger,
    Metadata,
    Sent,
    init_producer_id,
    make_batch,
    one_batch_produce,
)

FINISH_S = 120.0  # after `until_s`, how long unacknowledged messages are still retried
MAX_QUEUED = 12  # unacknowledged messages per partition before the producer waits


@dataclass
class _Message:
    sent: Sent
    epoch: int = -1  # the (epoch, sequence) it was last sent with; -1: not yet in this epoch
    sequence: int = -1
    in_flight: bool = False


@dataclass
class _Partition:
    queue: collections.deque[_Message] = field(default_factory=collections.deque)  # unacknowledged
    next_sequence: int = 0
    next_ack: int = 0  # librdkafka's next_ack_seq
    in_flight: int = 0
    broker: int = -1  # where its requests in flight went
    created: int = 0
    draining: bool = False  # after a retriable error: nothing is sent until nothing is in flight


async def produce_pipelined(
    cluster: SimCluster, ledger: Ledger, rng: SimRandom, name: str, az: str, partitions: list[Key], until_s: float
) -> None:
    loop = asyncio.get_running_loop()
    client_id = f"{name},shoal_az={az}"
    metadata = Metadata(cluster, az, client_id, rng.fork("metadata"))
    connections = Connections(cluster, client_id)
    state = {key: _Partition() for key in partitions}
    producer_id, epoch = -1, 0
    draining = False
    stale = True
    answers: set[asyncio.Task[None]] = set()
    trace = cluster.sim.trace

    def answered(key: Key, message: _Message, response: Any | BaseException) -> None:
        nonlocal stale, draining
        part = state[key]
        part.in_flight -= 1
        message.in_flight = False
        attempt = message.sent.attempts[-1]
        if isinstance(response, BaseException):  # lost connection: may or may not be in the log
            trace.record(
                f"client:{name}", "%s %s via %s: %r", message.sent.batch, attempt.wire, attempt.connection, response
            )
            attempt.outcome = "ambiguous"
            stale = part.draining = True
            return
        if message not in part.queue:
            return  # acknowledged implicitly meanwhile (below)
        result = response.responses[0].partition_responses[0]
        code = ErrorCode(result.error_code)
        attempt.error = code
        trace.record(
            f"client:{name}", "%s %s via %s: %s", message.sent.batch, attempt.wire, attempt.connection, code.name
        )
        if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            attempt.outcome = "acked"
            if code == ErrorCode.NONE:
                message.sent.acked_offset = result.base_offset
            message.sent.must_land = True
            while part.queue[0] is not message:  # rd_kafka_dr_implicit_ack: the earlier ones landed too
                part.queue.popleft().sent.must_land = True
            part.queue.popleft()
            if message.epoch == epoch:
                part.next_ack = max(part.next_ack, message.sequence + 1)
            return
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and message.epoch == epoch:
            attempt.outcome = "definite"
            if message.sequence <= part.next_ack:
                ledger.violation(
                    f"{name}: OUT_OF_ORDER_SEQUENCE_NUMBER for {message.sent.batch} (epoch {epoch}, sequence "
                    f"{message.sequence}, next to acknowledge {part.next_ack}): librdkafka fails fatally"
                )
            draining = True  # the earlier batch failed: drain, bump the epoch, send everything again
            return
        if code in RETRIABLE:
            attempt.outcome = "ambiguous" if code in AMBIGUOUS_ERRORS else "definite"
            stale = stale or code in REFRESH_ERRORS
            part.draining = True  # rd_kafka_idemp_drain_toppar: retry once nothing is in flight
            return
        attempt.outcome = "definite"
        ledger.violation(f"{name}: {code.name} for {message.sent.batch} (epoch {message.epoch})")
        part.queue.remove(message)  # librdkafka fails the message and goes on

    while True:
        now = loop.time()
        pending = any(part.queue for part in state.values())
        if now >= until_s + FINISH_S or (now >= until_s and not pending):
            break
        if producer_id < 0:
            producer_id = await init_producer_id(cluster, connections, rng)
            if producer_id < 0:
                await asyncio.sleep(0.25)
            continue
        if draining:
            if any(part.in_flight for part in state.values()):
                await asyncio.sleep(0.01)
                continue
            epoch, draining = epoch + 1, False  # librdkafka bumps an idempotent producer's epoch locally
            trace.record(f"client:{name}", "drained: epoch bumped to %d", epoch)
            for part in state.values():
                part.next_sequence = part.next_ack = 0
        if stale:
            stale = not await metadata.refresh()
            if stale:
                await asyncio.sleep(0.25)
                continue
            trace.record(f"client:{name}", "metadata: %s", sorted(metadata.leaders.items()))
        if now < until_s:
            key = partitions[rng.randrange(len(partitions))]
            part = state[key]
            if len(part.queue) < MAX_QUEUED:
                part.created += 1
                batch = f"{name}/{key[0]}-{key[1]}/{part.created}"
                sent = ledger.sent.setdefault(batch, Sent(batch, key, idempotent=True, sequence=part.created))
                part.queue.append(_Message(sent))
        for part in state.values():
            part.draining = part.draining and part.in_flight > 0
        sendable = [
            key
            for key, part in state.items()
            if key in metadata.leaders
            and not part.draining
            and part.in_flight < MAX_IN_FLIGHT
            and (part.in_flight == 0 or part.broker == metadata.leaders[key])
            and any(not m.in_flight for m in part.queue)
        ]
        if not sendable:
            await asyncio.sleep(rng.between((0.005, 0.03)))
            continue
        key = sendable[rng.randrange(len(sendable))]
        part = state[key]
        message = next(m for m in part.queue if not m.in_flight)
        if message.epoch != epoch:
            message.epoch, message.sequence = epoch, part.next_sequence
            part.next_sequence += 1
        try:
            conn = connections.get(metadata.leaders[key])
        except ConnectionLost:
            stale = True
            await asyncio.sleep(0.2)
            continue
        message.sent.attempts.append(
            Attempt(
                f"{name}#{connections.opened}->{metadata.leaders[key]}",
                len(message.sent.attempts) + 1,
                wire=f"e{epoch}s{message.sequence}",
            )
        )
        records = make_batch(
            message.sent.batch, cluster.sim.clock.now_ms(), producer_id, message.sequence, producer_epoch=epoch
        )
        trace.record(
            f"client:{name}",
            "send %s %s via %s",
            message.sent.batch,
            message.sent.attempts[-1].wire,
            message.sent.attempts[-1].connection,
        )
        request = one_batch_produce(key, records)
        message.in_flight = True
        part.in_flight += 1
        part.broker = metadata.leaders[key]
        answer = conn.send(request, PRODUCE_V)

        async def wait(key: Key, message: _Message, answer: asyncio.Future[Any]) -> None:
            try:
                response: Any | BaseException = await asyncio.wait_for(answer, 35.0)
            except (ConnectionLost, TimeoutError) as exc:
                response = exc
            answered(key, message, response)

        task = loop.create_task(wait(key, message, answer))
        answers.add(task)
        task.add_done_callback(answers.discard)
        await asyncio.sleep(rng.between((0.001, 0.02)))
    connections.close_all()
    await asyncio.gather(*answers, return_exceptions=True)
    for part in state.values():
        for message in part.queue:
            for attempt in message.sent.attempts:
                if attempt.outcome == "pending":
                    attempt.outcome = "ambiguous"
