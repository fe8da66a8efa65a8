"""Fixtures shared by every test tier: fake AWS credentials, a moto S3 server and an etcd
server (both session-scoped). A missing moto or etcd skips outside CI and fails under CI=true
(tests/gates.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.etcd_server import EtcdServer, require_etcd_binary, start_etcd
from tests.gates import require_module
from tests.moto_server import FAKE_AWS_ENV, MotoServer, start_moto, stop_process

# No test asserts a duration (docs/testing.md), hypothesis' per-example deadline included: under
# xdist on two cores an example may wait for a core longer than its 200 ms default.
settings.register_profile("shoal", deadline=None)
settings.load_profile("shoal")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs the suite in xdist workers with `--dist loadgroup`: each test module runs
    whole on one worker (its module fixtures and its order stay as written), except tests marked
    `spread` (independent simulation chunks), which go to whichever worker is free."""
    for item in items:
        if item.get_closest_marker("spread") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


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
    """One moto S3 server for the session. Without moto's server (or with a broken install)
    this skips, except under CI=true, where it fails: a skip there would hide every S3 test."""
    require_module("moto.server", "moto[server] cannot be imported (pip install -e '.[test]')")
    try:
        process, server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        stop_process(process)


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for the session: give each test its own key prefix. Tests that stop or
    restart etcd start their own with `tests.etcd_server.start_etcd`. Without the etcd
    binary this skips, except under CI=true, where it fails."""
    require_etcd_binary()
    try:
        server = start_etcd(tmp_path_factory.mktemp("etcd"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        server.stop()
