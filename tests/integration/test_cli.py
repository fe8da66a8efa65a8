"""The `shoal broker` command as an operator meets it: bad configuration is refused with a
message naming the key, and idle client connections are closed after connections.max.idle.ms."""

from __future__ import annotations

import select
import socket
import subprocess

import pytest

from .clients import RawConnection
from .harness import broker_command

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "args,key",
    [
        (["--set", "num.partitions=zero"], "num.partitions"),
        (["--set", "no.such.key=1"], "no.such.key"),
        (["--listen", "localhost"], "listen"),
        (["--metadata", "zookeeper://x"], "metadata"),
        (["--object-store", "s3://Bad_Bucket/x"], "object.store"),
        (["--object-store", "ftp://host/dir"], "object.store"),
        (["--set", "wal.buffer.max.bytes=134217728"], "wal.max.inflight.bytes"),
        (["--set", "diskless.default=maybe"], "diskless.default"),
    ],
)
def test_bad_config_exits_2_naming_the_key(tmp_path, args: list[str], key: str) -> None:
    result = subprocess.run(
        [*broker_command(), "broker", "--data-dir", str(tmp_path), *args], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert key in result.stderr and "Traceback" not in result.stderr


def test_bad_toml_file_is_reported(tmp_path) -> None:
    config = tmp_path / "shoal.toml"
    config.write_text("num.partitions = = 1\n")
    result = subprocess.run(
        [*broker_command(), "broker", "--config", str(config)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "not valid TOML" in result.stderr


def test_idle_connection_is_closed(broker_factory) -> None:
    """connections.max.idle.ms=1000: a connection with no request is closed by the broker
    (not by our timeout), while one that sends a request every 200 ms is still answered after
    that: idleness is what closes a connection, not its age."""
    from kafka.protocol.metadata import ApiVersionsRequest

    broker = broker_factory(extra_args=["--set", "connections.max.idle.ms=1000"])
    with (
        RawConnection(broker.bootstrap) as busy,
        socket.create_connection(("127.0.0.1", broker.port), timeout=10) as idle,
    ):
        for _ in range(150):  # bounded: 150 x 200 ms = 30 s
            assert busy.request(ApiVersionsRequest(), 0, timeout_s=10).error_code == 0
            if select.select([idle], [], [], 0.2)[0]:
                break
        else:
            raise AssertionError("the idle connection was still open after 30 s")
        assert idle.recv(1) == b"", "the broker sent data on a connection that sent no request"
        assert busy.request(ApiVersionsRequest(), 0, timeout_s=10).error_code == 0, (
            "the busy connection did not outlive the idle one"
        )
