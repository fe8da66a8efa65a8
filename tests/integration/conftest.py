"""Fixtures for the integration tests: brokers (one per test, or one per module where the
tests only add topics), proxies, and the broker's stderr tail attached to any failure."""

from __future__ import annotations

import pytest

from .harness import BrokerProcess
from .proxy import TcpProxy

# Brokers and proxies that have not been torn down yet: the ones the current test uses.
_ACTIVE_BROKERS: list[BrokerProcess] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for b in _ACTIVE_BROKERS:
            report.sections.append((f"broker log tail (port {b.port}, pid {b.pid}, running={b.running()})", b.tail(80)))
    return report


class _Factory:
    def __init__(self, base_dir):
        self.base_dir = base_dir
        self.brokers: list[BrokerProcess] = []

    def __call__(self, name: str = "broker", *, start: bool = True, **kwargs) -> BrokerProcess:
        b = BrokerProcess(self.base_dir / name / "data", self.base_dir / name / "broker.log", **kwargs)
        self.brokers.append(b)
        _ACTIVE_BROKERS.append(b)
        if start:
            b.start()
        return b

    def close(self) -> None:
        for b in self.brokers:
            try:
                b.stop()
            finally:
                b.kill()
                if b in _ACTIVE_BROKERS:
                    _ACTIVE_BROKERS.remove(b)


@pytest.fixture
def broker_factory(tmp_path):
    """make(name, start=True, advertise_port=..., config_file=...) -> BrokerProcess"""
    factory = _Factory(tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    """A fresh broker for one test."""
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory) -> BrokerProcess:
    """One broker shared by a module whose tests each use their own topics."""
    factory = _Factory(tmp_path_factory.mktemp("module-broker"))
    yield factory()
    factory.close()


@pytest.fixture
def proxy_factory():
    """make(target_port, listen_port=None, drop_every_bytes=None, max_drops=None) -> started TcpProxy"""
    proxies: list[TcpProxy] = []

    def make(target_port: int, **kwargs) -> TcpProxy:
        p = TcpProxy(target_port, **kwargs).start()
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        p.stop()
