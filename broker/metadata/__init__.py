"""Cluster metadata: the MetadataStore interface, its backends and the records in it."""

from __future__ import annotations

from ..clock import Clock
from ..config import BrokerConfig, ConfigError
from .local import LocalMetadataStore
from .store import (
    EventType,
    KeyValue,
    Lease,
    LeaseExpired,
    LeaseKeepAlive,
    MetadataError,
    MetadataStore,
    MetadataUnavailable,
    RevisionCompacted,
    RevisionConflict,
    Watch,
    WatchEvent,
)

__all__ = [
    "EventType",
    "KeyValue",
    "Lease",
    "LeaseExpired",
    "LeaseKeepAlive",
    "MetadataError",
    "MetadataStore",
    "MetadataUnavailable",
    "RevisionCompacted",
    "RevisionConflict",
    "Watch",
    "WatchEvent",
    "open_store",
]


def open_store(config: BrokerConfig, clock: Clock) -> MetadataStore:
    """The backend named by the `metadata` URL (nothing is connected until first use)."""
    url = config.metadata
    if url == "local:":
        return LocalMetadataStore(config.data_path / "metadata" / "store.json", clock)
    if url.startswith("etcd://"):
        from .etcd import EtcdMetadataStore  # late: grpc is imported only for etcd

        try:
            return EtcdMetadataStore(url, clock=clock)
        except ValueError as exc:
            raise ConfigError(f"metadata: {exc}") from None
    raise ConfigError(f"metadata must be local: or etcd://host:port/prefix, got {url!r}")
