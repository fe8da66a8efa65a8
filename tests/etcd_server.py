"""A single-member etcd on loopback for tests and scripts: `broker.devcluster.etcd` (also
behind `shoal dev cluster`), plus the pytest-aware `require_etcd_binary`.

From a shell: `python -m tests.etcd_server [DIR]` prints the metadata URL and runs until
Ctrl-C.
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path

from broker.devcluster.etcd import MISSING, EtcdServer, etcd_binary, start_etcd
from broker.devcluster.process import free_port

__all__ = ["EtcdServer", "etcd_binary", "free_port", "require_etcd_binary", "start_etcd"]


def require_etcd_binary() -> str:
    """For tests: the etcd executable; if it is missing, skip the test, or fail it under
    CI=true (CI must run the etcd tests; `.ci/install-etcd` installs etcd)."""
    from tests.gates import missing

    binary = etcd_binary()
    if binary is None:
        missing(MISSING)
    return binary


def main(argv: list[str]) -> int:
    base = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="shoal-etcd-"))
    server = start_etcd(base)
    print(
        f"etcd {server.endpoint} (pid {server.pid}, data {server.data_dir}); metadata URL: {server.url('shoal')}",
        flush=True,
    )
    try:
        # Blocked only now: etcd must not inherit a mask that blocks SIGTERM.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
