"""Broker configuration: one frozen msgspec struct, validated once at start.

Every field's config key is its name with `_` replaced by `.` (Kafka's dotted names
where Kafka has one: `num.partitions`, `log.retention.ms`, ...). Sources, lowest
precedence first: the TOML file (nested tables flatten to dotted keys), `SHOAL_*`
environment variables (`SHOAL_LOG_RETENTION_MS` -> `log.retention.ms`; other `SHOAL_`
variables are ignored with a warning), then command-line flags. A bad or unknown key in
the file or the flags stops the broker with a message naming it.
Every key is documented in docs/configuration.md (a test enforces it).
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Mapping

import msgspec

log = logging.getLogger(__name__)

LONG_MAX = 9223372036854775807
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
MillisOrUnlimited = Annotated[int, msgspec.Meta(ge=-1)]


class ConfigError(ValueError):
    """Configuration that the broker refuses to start with; the message names the key."""


class StartRefused(Exception):
    """Starting would harm another broker or data that is not this broker's (a data dir of
    another node or cluster or in use, a node id registered by a live broker). Like a
    ConfigError, the broker exits with status 2 and the message, which names the fix."""


def _dotted(name: str) -> str:
    return name.replace("_", ".")


class BrokerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename=_dotted):
    # Identity and placement
    node_id: NonNegative = 0
    az: str | None = None
    # Listeners
    listen: str = "127.0.0.1:9092"
    advertise: str | None = None
    metrics_listen: str | None = "127.0.0.1:9464"
    rpc_listen: str | None = None  # inter-broker RPC; required with etcd metadata
    rpc_advertise: str | None = None
    # Storage and metadata
    data_dir: str | None = "./data"
    stateless: bool = False
    object_store: str | None = None
    metadata: str = "local:"
    object_store_max_concurrency: Positive = 64
    # Diskless topics (docs/architecture.md "Diskless topics")
    diskless_default: bool = True
    wal_buffer_max_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 8 << 20
    wal_linger_ms: NonNegative = 250
    wal_quiet_ms: NonNegative = 10
    wal_quiet_min_bytes: NonNegative = 4 << 20
    wal_max_inflight_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 64 << 20
    wal_commit_deadline_ms: Positive = 60000
    # WAL file manager (broker/walfiles/; docs/configuration.md gives the reasoning behind each default)
    wal_file_manager_enable: bool = True
    wal_file_manager_interval_ms: Positive = 10000
    wal_file_manager_grace_ms: NonNegative = 30000
    wal_file_manager_max_deletes_per_cycle: Positive = 20000
    wal_file_manager_max_pending_deletes: Positive = 200000
    wal_file_manager_max_index_reads_per_cycle: Positive = 2000
    wal_file_manager_index_cache_objects: Positive = 100000
    wal_file_manager_backoff_max_ms: Positive = 300000
    cache_max_bytes: NonNegative = 256 << 20
    # Tiering (broker/tiering/; docs/configuration.md "Tiering")
    tiering_enable: bool = True
    tiering_interval_ms: Positive = 60000
    tiering_spark_master: str = "local[2]"
    tiering_spark_submit: str = ""
    tiering_job_timeout_ms: Positive = 1800000
    tiering_max_ranges_per_job: Positive = 64
    tiering_max_job_bytes: Positive = 8 << 30
    # Network limits (Kafka names and defaults)
    socket_request_max_bytes: Positive = 104857600
    connections_max_idle_ms: Positive = 600000
    queued_max_requests: Positive = 500
    queued_max_request_bytes: Positive = 256 << 20
    queued_max_request_bytes_per_connection: Positive = 64 << 20
    max_request_partition_size_limit: Positive = 2000
    # Topic defaults (broker synonyms of topic configs)
    num_partitions: Positive = 1
    default_replication_factor: Positive = 1
    auto_create_topics_enable: bool = True
    log_segment_bytes: Annotated[int, msgspec.Meta(ge=14)] = 1073741824
    log_roll_ms: Positive = 604800000
    log_retention_ms: MillisOrUnlimited = 604800000
    log_retention_bytes: MillisOrUnlimited = -1
    log_local_retention_ms: Annotated[int, msgspec.Meta(ge=-2)] = -2
    log_local_retention_bytes: Annotated[int, msgspec.Meta(ge=-2)] = -2
    remote_storage_default: bool = False
    log_flush_interval_messages: Positive = LONG_MAX
    log_flush_interval_ms: NonNegative = LONG_MAX
    log_index_interval_bytes: NonNegative = 4096
    log_index_size_max_bytes: Annotated[int, msgspec.Meta(ge=4)] = 10485760
    message_max_bytes: NonNegative = 1048588
    message_decompressed_max_bytes: Annotated[int, msgspec.Meta(ge=65536)] = 64 << 20
    min_insync_replicas: Positive = 1
    log_message_timestamp_type: str = "CreateTime"
    log_message_timestamp_before_max_ms: NonNegative = LONG_MAX
    log_message_timestamp_after_max_ms: NonNegative = 3600000
    # Cluster and replication (docs/architecture.md "Cluster")
    broker_session_timeout_ms: Annotated[int, msgspec.Meta(ge=2000)] = 6000
    broker_heartbeat_interval_ms: Positive = 2000
    replica_lag_time_max_ms: Positive = 30000
    replica_fetch_max_bytes: Positive = 1048576
    replica_fetch_wait_max_ms: NonNegative = 500
    replica_fetch_backoff_ms: NonNegative = 1000
    max_incremental_fetch_session_cache_slots: NonNegative = 1000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: Positive = 300
    controlled_shutdown_enable: bool = True
    controlled_shutdown_timeout_ms: NonNegative = 30000
    offsets_topic_replication_factor: Positive = 3
    # Consumer groups (Kafka names and defaults)
    offsets_topic_num_partitions: Positive = 50
    offsets_topic_segment_bytes: Annotated[int, msgspec.Meta(ge=14)] = 104857600
    offsets_topic_compaction_min_records: Positive = 10000
    offsets_commit_timeout_ms: Positive = 5000
    offsets_retention_minutes: Positive = 10080
    offsets_retention_check_interval_ms: Positive = 600000
    offset_metadata_max_bytes: NonNegative = 4096
    group_initial_rebalance_delay_ms: NonNegative = 3000
    group_min_session_timeout_ms: NonNegative = 6000
    group_max_session_timeout_ms: NonNegative = 1800000
    group_max_size: Positive = 2147483647
    # Transactions (Kafka names and defaults)
    transaction_state_log_num_partitions: Positive = 50
    transaction_state_log_replication_factor: Positive = 3
    transaction_state_log_min_isr: Positive = 2
    transaction_state_log_segment_bytes: Annotated[int, msgspec.Meta(ge=14)] = 104857600
    transaction_max_timeout_ms: Positive = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: Positive = 10000
    transaction_partition_verification_enable: bool = True
    transaction_partition_verification_max_permits: Positive = 10000
    transactional_id_expiration_ms: Positive = 604800000
    transaction_remove_expired_transaction_cleanup_interval_ms: Positive = 3600000
    # Background work
    log_retention_check_interval_ms: Positive = 300000
    log_flush_scheduler_interval_ms: Positive = 1000
    producer_id_expiration_ms: Positive = 86400000
    producer_id_expiration_check_interval_ms: Positive = 600000
    producer_sequence_barriers_max: Positive = 10000
    log_open_files_max: NonNegative = 0  # 0: half of RLIMIT_NOFILE (broker/log/open_files.py)

    def __post_init__(self) -> None:
        for key in ("listen", "advertise", "metrics.listen", "rpc.listen", "rpc.advertise"):
            value = getattr(self, key.replace(".", "_"))
            if value is not None:
                parse_host_port(value, key)
        for key, address in (("advertise", self.advertised), ("rpc.advertise", self.rpc_advertised)):
            if address is not None and address[0] in WILDCARD_HOSTS:
                raise ConfigError(
                    f"{key}: {address[0]} is not an address clients can connect to (listening on it is "
                    f"fine): set {key} to this broker's name or IP, e.g. --{key.replace('.', '-')} "
                    f"broker0.example:{address[1]}"
                )
        if self.log_message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ConfigError(
                "log.message.timestamp.type must be CreateTime or LogAppendTime, "
                f"not {self.log_message_timestamp_type!r}"
            )
        if self.metadata != "local:" and not self.metadata.startswith("etcd://"):
            raise ConfigError(f"metadata must be local: or etcd://host:port/prefix, got {self.metadata!r}")
        if self.metadata.startswith("etcd://") and self.rpc_listen is None:
            raise ConfigError("rpc.listen is required with etcd metadata: brokers replicate over it")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ConfigError(
                f"broker.heartbeat.interval.ms ({self.broker_heartbeat_interval_ms}) must be below "
                f"broker.session.timeout.ms ({self.broker_session_timeout_ms})"
            )
        if self.object_store is not None:
            from .objectstore import object_store_scheme  # late: keeps config free of store imports at load

            try:
                object_store_scheme(self.object_store)
            except ValueError as exc:
                raise ConfigError(f"object.store: {exc}") from None
        if self.wal_max_inflight_bytes < self.wal_buffer_max_bytes:
            raise ConfigError(
                f"wal.max.inflight.bytes ({self.wal_max_inflight_bytes}) must be at least "
                f"wal.buffer.max.bytes ({self.wal_buffer_max_bytes})"
            )
        if self.stateless and self.data_dir is not None and self.data_dir != "./data":
            raise ConfigError("--stateless and data.dir are exclusive: a stateless broker has no data dir")
        if self.stateless and (not self.metadata.startswith("etcd://") or self.object_store is None):
            raise ConfigError(
                "a stateless broker keeps nothing locally: it needs etcd metadata (--metadata "
                "etcd://...) and a shared object store (--object-store s3://...)"
            )

    @property
    def advertised(self) -> tuple[str, int]:
        return parse_host_port(self.advertise or self.listen, "advertise")

    @property
    def rpc_advertised(self) -> tuple[str, int] | None:
        address = self.rpc_advertise or self.rpc_listen
        return parse_host_port(address, "rpc.advertise") if address else None

    @property
    def object_store_url(self) -> str:
        """`object.store`, else a directory next to the data: the embedded default."""
        if self.object_store:
            return self.object_store
        return (self.data_path / "objects").resolve().as_uri()

    @property
    def data_path(self) -> Path:
        if self.data_dir is None:
            raise ConfigError("this broker has no data.dir")
        return Path(self.data_dir)


CONFIG_KEYS: tuple[str, ...] = tuple(_dotted(f) for f in BrokerConfig.__struct_fields__)


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})  # listen on every interface; no address to connect to


def parse_host_port(value: str, key: str) -> tuple[str, int]:
    """HOST:PORT, IPv6 hosts in brackets (`[::1]:9092`); the host comes back without them."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key} must be HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"{key}: an IPv6 address needs brackets, as in [{host}]:{port}; got {value!r}")
    if not host or any(c in host for c in "[] /"):
        raise ConfigError(f"{key} must be HOST:PORT, got {value!r}")
    return host, int(port)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


ENV_PREFIX = "SHOAL_"


def _from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`SHOAL_<KEY>` for every known key. Other `SHOAL_` variables are not ours to refuse:
    Kubernetes injects `SHOAL_PORT=tcp://...` into every pod of a namespace with a Service
    named shoal, and tools have their own (`SHOAL_ETCD_BIN`); they are named in a warning."""
    found, ignored = {}, []
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower().replace("_", ".")
        if key in CONFIG_KEYS:
            found[key] = value
        else:
            ignored.append(name)
    if ignored:
        log.warning(
            "ignoring environment variable(s) %s: not config keys (SHOAL_<KEY> sets a key, "
            "e.g. SHOAL_LOG_RETENTION_MS for log.retention.ms; see docs/configuration.md)",
            ", ".join(sorted(ignored)),
        )
    return found


def load_config(
    config_file: str | None = None, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> BrokerConfig:
    """Merge file < env < overrides and validate; raise ConfigError naming the bad key."""
    merged: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, "rb") as fh:
                merged.update(_flatten(tomllib.load(fh)))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from exc
    merged.update(_from_env(os.environ if environ is None else environ))
    merged.update(overrides or {})
    if merged.get("stateless") in (True, "true", "1") and "data.dir" not in merged:
        merged["data.dir"] = None
    unknown = sorted(k for k in merged if k not in CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"unknown config key {unknown[0]!r} (see docs/configuration.md)")
    try:
        return msgspec.convert(merged, BrokerConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid config: {_readable(exc)}") from exc


def _readable(exc: msgspec.ValidationError) -> str:
    """msgspec says "Expected `int`, got `str` - at `$.num.partitions`"; put the key first."""
    text = str(exc)
    message, _, where = text.rpartition(" - at ")
    if where.startswith("`$.") and where.endswith("`"):
        return f"{where[3:-1]}: {message}"
    return text
