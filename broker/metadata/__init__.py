"""Cluster metadata: the MetadataStore interface, its backends and the records in it."""

from __future__ import annotations

from ..config import BrokerConfig, ConfigError
from .local import LocalMetadataStore
from .store import KeyValue, MetadataStore, RevisionConflict

__all__ = ["KeyValue", "MetadataStore", "RevisionConflict", "open_store"]


def open_store(config: BrokerConfig) -> MetadataStore:
    """The backend named by the `metadata` URL."""
    url = config.metadata
    if url == "local:":
        return LocalMetadataStore(config.data_path / "metadata" / "store.json")
    if url.startswith("etcd://"):
        raise ConfigError("metadata: etcd:// is not available in this build yet; use local:")
    raise ConfigError(f"metadata must be local: or etcd://host:port/prefix, got {url!r}")
