"""A broker's stop flushes its partitions on worker threads, several at once (issue 28): it
closed them one by one on the event loop, a few fsyncs each, so a broker with thousands of
written partitions took minutes to stop and its loop did nothing else meanwhile. The files
are still released on the loop's thread, and every log ends with a clean checkpoint at its
end."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from broker.log.checkpoint import read_checkpoint
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch


def test_stop_closes_partitions_on_worker_threads_and_leaves_them_clean(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    threads: list[int] = []
    close_durably = Partition.close_durably

    def recording(self: Partition) -> None:
        threads.append(threading.get_ident())
        close_durably(self)

    monkeypatch.setattr(Partition, "close_durably", recording)

    async def scenario() -> list[Path]:
        harness = InProcessBroker(tmp_path)
        await harness.__aenter__()
        client = harness.client()
        assert await client.create_topic("t", 12, {"diskless.enable": "false"}) == ErrorCode.NONE
        for index in range(12):
            assert await client.produce("t", index, build_batch([(None, b"v%d" % index)])) == (ErrorCode.NONE, 0)
        directories = [p.directory for p in harness.broker.replica_manager.partitions.values() if p.topic == "t"]
        await harness.__aexit__(None, None, None)
        return directories

    loop_thread = threading.get_ident()
    directories = asyncio.run(scenario())
    assert threads and loop_thread not in threads, "partitions were closed on the event loop's thread"
    for directory in directories:
        checkpoint = read_checkpoint(directory)
        assert checkpoint is not None and checkpoint.clean_shutdown and checkpoint.recovery_point == 1
