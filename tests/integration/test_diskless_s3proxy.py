"""Self-test of tests/s3proxy.py, the fault/latency proxy the diskless S3 tests and the
benchmarks put between the broker and moto: every S3 store operation works through it,
client connections are kept alive, delays are per method, faults are what they claim to be
(503 SlowDown not forwarded; lost answer = forwarded, then reset), settings change at runtime,
and it stops on SIGTERM."""

from __future__ import annotations

import asyncio
import http.client
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error

import pytest

from tests.s3proxy import REPO_ROOT, configure_s3proxy, running_s3proxy, s3proxy_stats

pytestmark = pytest.mark.integration


def _conn(port: int) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", port, timeout=10)


PUBLIC = {"x-amz-acl": "public-read"}  # moto refuses unsigned GETs of private objects
PUT_DELAY_MS = 2000  # far longer than an undelayed GET's round trip through the proxy


def _request(conn, method: str, path: str, body: bytes | None = None):
    conn.request(method, path, body=body, headers=PUBLIC if method == "PUT" else {})
    resp = conn.getresponse()
    return resp.status, dict(resp.getheaders()), resp.read()


def test_s3_store_operations_through_proxy(moto_server, tmp_path):
    """The broker's S3 store, through the proxy: put, conditional put, get (whole, ranged,
    missing), head, list, delete_many (a POST) all behave as against moto directly."""
    from broker.objectstore import NotFound
    from broker.clock import SystemClock
    from broker.objectstore.s3 import S3ObjectStore

    async def body(port: int) -> None:
        store = S3ObjectStore(
            moto_server.bucket,
            f"s3proxy-self/{os.getpid()}",
            endpoint_url=f"http://127.0.0.1:{port}",
            region="us-east-1",
            clock=SystemClock(),
            rng=random.Random(),
        )
        try:
            big = os.urandom(3 << 20)  # large enough for Expect: 100-continue
            await store.put("a/big", big)
            assert await store.get("a/big") == big
            assert await store.get("a/big", 1000, 5096) == big[1000:5096]
            info = await store.head("a/big")
            assert info is not None and info.size == len(big)
            assert await store.head("a/none") is None
            with pytest.raises(NotFound):
                await store.get("a/none")
            assert await store.put_if_absent("a/small", b"x") is True
            assert await store.put_if_absent("a/small", b"y") is False
            assert [o.key async for o in store.list("a/")] == ["a/big", "a/small"]
            assert sorted(await store.delete_many(["a/big", "a/small"])) == ["a/big", "a/small"]
            assert [o.key async for o in store.list("a/")] == []
        finally:
            await store.close()

    with running_s3proxy(moto_server.port, log_path=tmp_path / "proxy.log") as port:
        asyncio.run(body(port))
        stats = s3proxy_stats(port)
        assert stats["upstream_errors"] == 0 and stats["bad_requests"] == 0, stats
        assert not stats["failed"] and not stats["lost"], stats
        assert set(stats["requests"]) >= {"PUT", "GET", "HEAD", "POST"}, stats


def test_keep_alive_delays_and_faults(moto_server, tmp_path):
    bucket = f"/{moto_server.bucket}"
    with running_s3proxy(
        moto_server.port, delay_ms=f"put={PUT_DELAY_MS},get=0", fail_methods="PUT", log_path=tmp_path / "proxy.log"
    ) as port:
        conn = _conn(port)
        # Delays by method, seen as an order: a PUT sent first, on its own connection, is still
        # in its delay after a GET sent later on another connection has been answered.
        slow = _conn(port)
        slow.request("PUT", f"{bucket}/k1", body=b"v1", headers=PUBLIC)
        assert _request(conn, "GET", f"{bucket}/k0")[0] == 404  # undelayed, straight from moto
        assert not select.select([slow.sock], [], [], 0)[0], "the PUT was answered before the later GET"
        answer = slow.getresponse()
        assert (answer.status, answer.read()) == (200, b"")
        slow.close()
        configure_s3proxy(port, delay_ms={})
        # One client connection for many requests (keep-alive).
        status, headers, data = _request(conn, "GET", f"{bucket}/k1")
        assert (status, data) == (200, b"v1")
        status, headers, data = _request(conn, "HEAD", f"{bucket}/k1")
        assert (status, headers.get("Content-Length"), data) == (200, "2", b"")
        # A chunked request body is relayed (with Content-Length).
        conn.putrequest("PUT", f"{bucket}/k2")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.putheader("x-amz-acl", "public-read")
        conn.endheaders()
        conn.send(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        resp.read()
        assert _request(conn, "GET", f"{bucket}/k2")[2] == b"abcde"
        # conn, slow, the configure call and the stats call itself
        assert s3proxy_stats(port)["client_connections_total"] == 4
        # Expect: 100-continue is answered before the body is sent.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(
                f"PUT {bucket}/k3 HTTP/1.1\r\nHost: x\r\nx-amz-acl: public-read\r\nContent-Length: 4\r\n"
                "Expect: 100-continue\r\n\r\n".encode()
            )
            assert raw.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            raw.sendall(b"body")
            assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        assert _request(conn, "GET", f"{bucket}/k3")[2] == b"body"

        # fail_fraction=1 on PUT: 503 SlowDown with an S3 error body, nothing forwarded; GETs pass.
        configure_s3proxy(port, fail_fraction=1.0, delay_ms={})
        status, _h, data = _request(conn, "PUT", f"{bucket}/k1", b"changed")
        assert status == 503 and b"<Code>SlowDown</Code>" in data
        assert _request(conn, "GET", f"{bucket}/k1")[2] == b"v1"  # not forwarded; same connection
        # lose_fraction=1: forwarded (the object changes), the answer never comes.
        configure_s3proxy(port, fail_fraction=0.0, lose_fraction=1.0)
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            _request(conn, "PUT", f"{bucket}/k1", b"lost-answer")
        conn.close()
        configure_s3proxy(port, lose_fraction=0.0)
        conn = _conn(port)
        assert _request(conn, "GET", f"{bucket}/k1")[2] == b"lost-answer"
        conn.close()
        stats = s3proxy_stats(port)
        assert (stats["failed"], stats["lost"]) == ({"PUT": 1}, {"PUT": 1}), stats
        with pytest.raises(urllib.error.HTTPError) as bad:
            configure_s3proxy(port, fail_fraction=2.0)
        assert bad.value.code == 400


def test_cli_port_file_and_sigterm(moto_server, tmp_path):
    """Run as documented: the port file appears, a non-loopback upstream is refused, SIGTERM
    ends it with exit code 0."""
    refused = subprocess.run(
        [sys.executable, "-m", "tests.s3proxy", "--upstream", "10.1.2.3:80", "--port-file", str(tmp_path / "nope")],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
    )
    assert refused.returncode != 0 and b"loopback" in refused.stderr
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.s3proxy",
            "--upstream",
            f"127.0.0.1:{moto_server.port}",
            "--port-file",
            str(port_file),
            "--delay-ms",
            "get=5",
            "--seed",
            "3",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        port = int(port_file.read_text())
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        stats = s3proxy_stats(port)
        assert stats["settings"]["delay_ms"] == {"GET": 5.0} and stats["pid"] == proc.pid
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert b"exiting, stats" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        proc.stderr.close()
