"""The broker's AZ router: the client's AZ for a request, and the broker that represents a
diskless partition for clients of an AZ (the partition's leader when that AZ has no live
broker). A draining broker (controlled shutdown) represents nothing: its clients move to the
AZ's other brokers before it stops serving."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client_az import ClientRacks
from .representatives import representative

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..protocol.header import RequestHeader


class AzRouter:
    def __init__(self, view: "ClusterView", az: str | None) -> None:
        self._view = view
        self.az = az
        self.racks = ClientRacks()

    def client_az(self, header: "RequestHeader") -> tuple[str | None, bool]:
        """(AZ, whether the client named it) for the client that sent `header`."""
        return self.racks.client_az(header.client_id, header.peer, self.az)

    def brokers_in(self, az: str | None) -> list[int]:
        return [b.node_id for b in self._view.brokers.values() if b.az == az and not b.draining]

    def represented_az(self, az: str | None) -> str | None:
        """The AZ a representative names in its commits (representation_fence.py): None for
        one no broker is in, draining or not, so a leader keeps one entry per real AZ whatever
        AZs clients make up."""
        return az if any(b.az == az for b in self._view.brokers.values()) else None

    def representative(self, topic_id: str, partition: int, leader: int, client_az: str | None) -> int:
        chosen = representative(topic_id, partition, self.brokers_in(client_az))
        return leader if chosen is None else chosen
