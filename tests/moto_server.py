"""A moto S3 server on loopback, for tests and benchmarks (`start_moto` / `stop_process`).

moto's server mode is started as a subprocess on a free 127.0.0.1 port, polled until it
answers (bounded), given a bucket, and killed by its PID at the end. `FAKE_AWS_ENV` holds fake
credentials and points the shared config files at /dev/null, so the S3 store's normal
credential chain finds them and nothing on the machine leaks in.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

BUCKET = "shoal-contract"
START_TIMEOUT_S = 30.0

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass(frozen=True)
class MotoServer:
    host: str
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means it is serving
    except OSError:
        return False


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def start_moto(log_path: str | os.PathLike[str], bucket: str = BUCKET) -> tuple[subprocess.Popen[bytes], MotoServer]:
    """Start moto's server with `bucket` created; raise RuntimeError (with the log tail) if it
    does not answer within START_TIMEOUT_S. The caller stops it with `stop_process`."""
    for _ in range(3):  # the free port can be taken between probing and binding
        port = _free_port()
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(f"http://127.0.0.1:{port}/moto-api/"):
                break
            time.sleep(0.1)
        if process.poll() is None and _answers(f"http://127.0.0.1:{port}/moto-api/"):
            break
        stop_process(process)
    else:
        with open(log_path, errors="replace") as log:
            raise RuntimeError(f"moto server did not start; log: {log.read()[-2000:]}")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
    except BaseException:
        stop_process(process)
        raise
    return process, MotoServer("127.0.0.1", port, bucket)
