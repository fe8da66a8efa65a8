"""What a broker in controlled shutdown asks its peers before it closes its listener: the
metadata-store revision their cluster view has applied (msgspec, versioned). Once every
peer has applied the revision at which the leaderships moved away, any broker a client asks
for metadata names the new leaders. An older broker does not know the tag and closes the
connection: the asker stops waiting for it."""

from __future__ import annotations

import msgspec

VIEW_REVISION_VERSION = 1


class ViewRevisionRequest(msgspec.Struct, tag="view_revision", array_like=True, frozen=True):
    version: int


class ViewRevisionResponse(msgspec.Struct, tag="view_revision_response", array_like=True, frozen=True):
    version: int
    node_id: int
    revision: int  # the highest store revision the peer's cluster view has applied
