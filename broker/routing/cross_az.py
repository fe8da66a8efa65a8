"""`shoal_cross_az_bytes_total{kind}`: bytes this broker exchanges with peers or clients in
another AZ, the figure diskless topics exist to keep near zero.

- `records`: record batch bytes, which only classic-topic replication carries between
  brokers (diskless entries hold coordinates, never records).
- `metadata`: every other inter-broker RPC byte: commits, diskless replication, entry
  reads, forwarded requests. Counted once, by the broker that makes the call (request out
  and response in); the called broker does not count it again.
- `client`: Kafka protocol bytes with clients that named an AZ (client.id token or
  client.rack) other than this broker's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Counter

    from ..cluster.view import ClusterView


class CrossAzBytes:
    def __init__(self, counter: "Counter", view: "ClusterView", az: str | None) -> None:
        self._records = counter.labels("records")
        self._metadata = counter.labels("metadata")
        self._client = counter.labels("client")
        self._view = view
        self._az = az
        self._peer_az: dict[str, str | None] = {}  # "rpc host:port" -> AZ
        self._unsorted: dict[str, int] = defaultdict(int)  # replication bytes not yet split by kind
        view.on_brokers_changed(self._peer_az.clear)

    def _remote(self, address: str) -> bool:
        if address not in self._peer_az:
            found = [b.az for b in self._view.brokers.values() if f"{b.rpc_host}:{b.rpc_port}" == address]
            self._peer_az[address] = found[0] if found else self._az
        return self._peer_az[address] != self._az

    def rpc_bytes(self, _direction: str, address: str, size: int) -> None:
        """RPC client hook for calls that carry no records."""
        if self._remote(address):
            self._metadata.inc(size)

    def replication_bytes(self, _direction: str, address: str, size: int) -> None:
        """RPC client hook of the replica fetcher: held until `replicated` splits them."""
        if self._remote(address):
            self._unsorted[address] += size

    def replicated(self, address: str, record_bytes: int) -> None:
        """A replica fetch answer from `address` was applied; `record_bytes` of it were records."""
        total = self._unsorted.pop(address, 0)
        if total:
            records = min(record_bytes, total)
            self._records.inc(records)
            self._metadata.inc(total - records)

    def client_bytes(self, client_az: str | None, named: bool, size: int) -> None:
        if named and client_az != self._az:
            self._client.inc(size)
