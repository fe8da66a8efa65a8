"""The dev cluster's listener ports stay out of the kernel's ephemeral range, where an
outgoing connection could take one between the probe and the child's bind (CI failed on
exactly that: a broker's metrics port was "already in use" at start)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from broker.devcluster import process
from broker.devcluster.process import PORT_FLOOR, ephemeral_port_range, free_ports, port_slice


def test_free_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    low, _ = ephemeral_port_range()
    ports = free_ports(50)
    assert len(set(ports)) == 50
    assert all(PORT_FLOOR <= port < low for port in ports)


def test_worker_slices_do_not_overlap() -> None:
    spans = [port_slice(slot, 32768) for slot in range(16)]
    for first, second in zip(spans, spans[1:]):
        assert first[0] < first[1] <= second[0] < second[1]
    assert spans[-1][1] <= 32768


def test_a_port_another_listener_holds_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    span = port_slice(5, ephemeral_port_range()[0])
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        next_port = process._cursor.get(span, span[0])
        holder.bind(("127.0.0.1", next_port))
        holder.listen()
        (port,) = free_ports(1)
        assert port != next_port and span[0] <= port < span[1]
    finally:
        holder.close()


def test_no_room_below_the_ephemeral_range_falls_back_to_the_kernels_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process, "ephemeral_port_range", lambda: (1024, 65535))
    assert port_slice(0, 1024) == (0, 0)
    (port,) = free_ports(1)
    assert port > 0


def test_unreadable_range_file_means_linux_defaults(tmp_path: Path) -> None:
    assert ephemeral_port_range(tmp_path / "missing") == (32768, 60999)
