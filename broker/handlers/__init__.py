"""One module per Kafka API. Importing a module registers its handler (see registry.py);
common.py and config_resources.py are helpers the API modules share."""

from __future__ import annotations

import importlib

_MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "find_coordinator",
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "txn_offset_commit",
    "list_transactions",
    "describe_transactions",
    "describe_producers",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "describe_cluster",
    "describe_topic_partitions",
    "delete_records",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "offset_delete",
    "offset_for_leader_epoch",
    "write_txn_markers",
)


def load_all() -> None:
    for name in _MODULES:
        importlib.import_module(f"{__name__}.{name}")
