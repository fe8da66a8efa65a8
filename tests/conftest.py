"""Fixtures shared by every test tier: fake AWS credentials and a moto S3 server (session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.moto_server import FAKE_AWS_ENV, MotoServer, start_moto, stop_process


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in FAKE_AWS_ENV.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(scope="session")
def moto_server(aws_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install -e '.[test]')")
    try:
        process, server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        stop_process(process)
