"""Self-tests of the integration harness and the fault-injecting proxy; no broker needed.

A tiny stand-in process (same command-line contract, serves /readyz, exits 0 on SIGTERM)
exercises BrokerProcess; a tiny echo server exercises TcpProxy.
"""

from __future__ import annotations

import signal
import socket
import sys
import textwrap
import threading

import pytest

from .clients import RawConnection
from .harness import BrokerError, BrokerProcess, free_port, wait_until
from .proxy import TcpProxy

pytestmark = pytest.mark.integration

FAKE_BROKER = textwrap.dedent("""
    import argparse, http.server, signal, sys, threading, pathlib
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd"); ap.add_argument("--listen"); ap.add_argument("--advertise")
    ap.add_argument("--node-id"); ap.add_argument("--data-dir"); ap.add_argument("--metrics-listen")
    ap.add_argument("--config"); ap.add_argument("--fail", action="store_true")
    a = ap.parse_args()
    print("fake broker starting", a.listen, file=sys.stderr, flush=True)
    if a.fail:
        print("boom: cannot start", file=sys.stderr, flush=True); sys.exit(3)
    pathlib.Path(a.data_dir, "marker").write_text("x")
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/readyz" else 404); self.end_headers()
        def log_message(self, *args): pass
    host, port = a.metrics_listen.rsplit(":", 1)
    srv = http.server.HTTPServer((host, int(port)), H)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    srv.serve_forever()
    print("fake broker stopped cleanly", file=sys.stderr, flush=True)
""")


@pytest.fixture
def fake_command(tmp_path):
    script = tmp_path / "fake_broker.py"
    script.write_text(FAKE_BROKER)
    return [sys.executable, str(script)]


def test_harness_lifecycle(tmp_path, fake_command):
    b = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", command=fake_command)
    b.start(timeout_s=10)
    try:
        assert b.running() and b.ready()
        assert (tmp_path / "data" / "marker").exists()
        assert b.stop() == 0  # graceful SIGTERM -> exit 0
        assert not b.running()
        b.start(timeout_s=10)  # restart on the same data dir and ports
        port = b.metrics_port
        b.kill()
        assert b.proc.returncode == -signal.SIGKILL
        b.restart(graceful=False, timeout_s=10)
        assert b.metrics_port == port and b.ready()
        assert b.starts == 3
        log = b.tail()
        assert log.count("fake broker starting") == 3 and "stopped cleanly" in log
    finally:
        b.kill()


def test_harness_reports_early_exit_with_log_tail(tmp_path, fake_command):
    b = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", command=fake_command, extra_args=["--fail"])
    with pytest.raises(BrokerError, match="boom: cannot start"):
        b.start(timeout_s=10)
    assert not b.running()


def test_harness_ready_deadline(tmp_path):
    # A process that never serves /readyz is killed at the deadline: by a signal, long before
    # its own 600 s sleep would have ended it.
    b = BrokerProcess(
        tmp_path / "data", tmp_path / "broker.log", command=[sys.executable, "-c", "import time; time.sleep(600)"]
    )
    with pytest.raises(BrokerError, match="not ready within"):
        b.start(timeout_s=1.5)
    assert not b.running()
    assert b.proc is not None and b.proc.returncode == -signal.SIGKILL


def test_harness_finds_newest_segment(tmp_path):
    b = BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    d = tmp_path / "data" / "sub" / "topic-a-1"
    d.mkdir(parents=True)
    for name in ("00000000000000000000.log", "00000000000000000120.log", "00000000000000000120.index"):
        (d / name).write_bytes(b"")
    assert b.partition_dir("topic-a", 1) == d
    assert b.newest_segment("topic-a", 1).name == "00000000000000000120.log"


class EchoServer:
    """Echoes everything back; one thread per connection; bounded by the test's lifetime."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn):
        with conn:
            conn.settimeout(10)
            try:
                while data := conn.recv(65536):
                    self.received += len(data)
                    conn.sendall(data)
            except OSError:
                pass

    def close(self):
        self.closed.set()
        self.sock.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


def _roundtrip(sock, payload: bytes) -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_proxy_forwards_and_drops_on_command(echo):
    with TcpProxy(echo.port) as proxy:
        a = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
        b = socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
        assert _roundtrip(a, b"hello") == b"hello"
        assert _roundtrip(b, b"x" * 200_000) == b"x" * 200_000
        wait_until(lambda: proxy.open_connections() == 2, 5, what="2 proxied connections")
        proxy.drop()
        for s in (a, b):
            assert RawConnection.wrap(s).closed_by_peer(5), "proxy did not drop the connection"
            s.close()
        assert proxy.drops == 1
        # New connections still work after a drop.
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as c:
            assert _roundtrip(c, b"again") == b"again"
        assert proxy.connections == 3


def test_proxy_drops_every_n_bytes(echo):
    with TcpProxy(echo.port, drop_every_bytes=1000, max_drops=3) as proxy:
        cut = 0
        for _ in range(20):  # bounded: each round sends 600 bytes
            with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as s:
                got = _roundtrip(s, b"y" * 600)
                if len(got) < 600:
                    cut += 1
            if proxy.drops >= 3:
                break
        assert proxy.drops == 3 and cut == 3
        # After max_drops the proxy is transparent.
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as s:
            assert _roundtrip(s, b"z" * 5000) == b"z" * 5000
        # The server saw exactly the bytes the proxy forwarded.
        wait_until(lambda: echo.received == proxy.bytes_up, 5, what="echo to catch up")


def test_proxy_target_down_closes_client():
    with TcpProxy(free_port()) as proxy:  # nothing listens on the target
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as s:
            assert RawConnection.wrap(s).closed_by_peer(8)


def test_proxy_drops_responses(echo):
    """direction="down": the request reaches the server in full, the answer is cut."""
    with TcpProxy(echo.port) as proxy:
        proxy.arm(1000, max_drops=1, direction="down")
        with socket.create_connection(("127.0.0.1", proxy.listen_port), timeout=5) as s:
            assert _roundtrip(s, b"a" * 600) == b"a" * 600
            got = _roundtrip(s, b"b" * 600)
        assert len(got) == 400 and proxy.drops == 1
        wait_until(lambda: echo.received == 1200, 5, what="the server to get both requests")
