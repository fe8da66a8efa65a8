"""A client's AZ, in Kafka-client terms: a `shoal_az=<az>` token in its client.id (Inkless's
`diskless_az=<az>` is accepted too), else the rack_id its Fetch requests carry
(client.rack), else the AZ of the broker it connected to.
"""

from __future__ import annotations

import re
from collections import OrderedDict

_TOKEN = re.compile(r"(?:^|[^A-Za-z0-9_])(?:shoal_az|diskless_az)=([^\s,;&|]+)")
MAX_REMEMBERED = 10_000  # connections whose rack we remember (least recently used dropped)


def az_from_client_id(client_id: str | None) -> str | None:
    """The AZ named by a `shoal_az=` / `diskless_az=` token anywhere in the client.id."""
    if not client_id or "_az=" not in client_id:
        return None
    found = _TOKEN.search(client_id)
    return found.group(1) if found else None


class ClientRacks:
    """rack_id of each connection's Fetch requests (by peer address), so that a consumer's
    Metadata requests on that connection are answered for its AZ."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._racks: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def remember(self, peer: str, rack: str | None) -> None:
        if not rack:
            return
        self._racks[peer] = rack
        self._racks.move_to_end(peer)
        while len(self._racks) > self._limit:
            self._racks.popitem(last=False)

    def forget(self, peer: str) -> None:
        self._racks.pop(peer, None)

    def client_az(self, client_id: str | None, peer: str, broker_az: str | None) -> tuple[str | None, bool]:
        """(the client's AZ, whether the client told us: False means it is assumed to be the
        broker's own AZ)."""
        named = az_from_client_id(client_id) or self._racks.get(peer)
        if named is not None:
            return named, True
        return broker_az, False
