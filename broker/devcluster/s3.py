"""A moto S3 server on loopback, for the dev cluster, tests and benchmarks (`start_moto` /
`stop_process`).

moto's server mode is started as a subprocess on a free 127.0.0.1 port, polled until it
answers (bounded), given a bucket, and stopped by its PID at the end. `FAKE_AWS_ENV` holds fake
credentials and points the shared config files at /dev/null, so the S3 store's normal
credential chain finds them and nothing on the machine leaks in. moto comes with the `[test]`
extra (`make install`), not with the broker.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .process import free_port, log_tail, stop_process

BUCKET = "shoal-contract"
START_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3  # the free port can be taken between probing and binding
MISSING = "moto[server] is not installed: run `make install` (pip install -e '.[test]')"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Would send a child elsewhere than the fake credentials or the endpoint in its URL.
_AWS_OVERRIDES = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@dataclass(frozen=True)
class MotoServer:
    host: str
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def object_store_url(self, prefix: str) -> str:
        """The broker's `object.store` URL for keys under `prefix` in the bucket."""
        return f"s3://{self.bucket}/{prefix}?endpoint={self.endpoint}&region={FAKE_AWS_ENV['AWS_DEFAULT_REGION']}"


def moto_available() -> bool:
    """Whether `python -m moto.server` can run here (moto plus the [server] extra's Flask
    parts), checked without starting it."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("moto.server", "flask_cors"))
    except ModuleNotFoundError:  # no `moto` package to look in for `moto.server`
        return False


def fake_aws_environ(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`base` with the fake credentials in, and the variables that would override them out:
    the environment for a broker that talks to the moto server."""
    env = {key: value for key, value in base.items() if key not in _AWS_OVERRIDES}
    return {**env, **FAKE_AWS_ENV}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means it is serving
    except OSError:
        return False


def _wait_serving(process: subprocess.Popen[bytes], url: str) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if _answers(url):
            return True
        time.sleep(0.1)
    return False


def start_moto(
    log_path: str | os.PathLike[str], bucket: str = BUCKET, *, new_session: bool = False
) -> tuple[subprocess.Popen[bytes], MotoServer]:
    """Start moto's server with `bucket` created; raise RuntimeError (with the log tail) if it
    does not answer within START_TIMEOUT_S. The caller stops it with `stop_process`.
    `new_session`: a terminal's Ctrl-C then reaches only the launcher, which stops it."""
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=new_session,
            )
        if _wait_serving(process, f"http://127.0.0.1:{port}/moto-api/"):
            break
        stop_process(process)
    else:
        raise RuntimeError(f"moto server did not start\n{log_tail(Path(log_path))}")
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
    except BaseException:
        stop_process(process)
        raise
    return process, MotoServer("127.0.0.1", port, bucket)
