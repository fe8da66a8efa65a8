"""Configuration: layering, validation messages, and documentation of every key."""

from pathlib import Path

import pytest

from broker.config import CONFIG_KEYS, ConfigError, load_config, parse_host_port
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import TOPIC_CONFIGS, describe, effective, validate_overrides

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_defaults_are_the_embedded_broker() -> None:
    config = load_config(environ={})
    assert config.listen == "127.0.0.1:9092" and config.data_dir == "./data" and config.metadata == "local:"


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    toml = tmp_path / "shoal.toml"
    toml.write_text("num.partitions = 2\nnode.id = 4\n[log]\nretention.ms = 1000\n")
    config = load_config(str(toml), environ={"SHOAL_NUM_PARTITIONS": "3"}, overrides={"node.id": "5"})
    assert (config.num_partitions, config.node_id, config.log_retention_ms) == (3, 5, 1000)


def test_shoal_variables_that_are_not_keys_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Regression (issue 17): any SHOAL_ variable was read as a key and an unknown one stopped
    the broker, so a Kubernetes Service named shoal (SHOAL_PORT=tcp://...) or the dev
    cluster's SHOAL_ETCD_BIN kept every broker from starting."""
    environ = {"SHOAL_PORT": "tcp://10.0.0.7:9092", "SHOAL_ETCD_BIN": "/usr/bin/etcd", "SHOAL_NUM_PARTITIONS": "3"}
    with caplog.at_level("WARNING", logger="broker.config"):
        config = load_config(environ=environ)
    assert config.num_partitions == 3
    assert "SHOAL_ETCD_BIN, SHOAL_PORT" in caplog.text and "log.retention.ms" in caplog.text
    with pytest.raises(ConfigError, match="num.partitions"):  # a known key's bad value still stops it
        load_config(environ={"SHOAL_NUM_PARTITIONS": "many"})


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        ({"num.partitions": "zero"}, "num.partitions"),
        ({"num.partitions": "0"}, "num.partitions"),
        ({"no.such.key": "1"}, "no.such.key"),
        ({"listen": "nowhere"}, "listen"),
        ({"log.message.timestamp.type": "Sometimes"}, "log.message.timestamp.type"),
        ({"listen": "::1:9092"}, "needs brackets"),
        ({"listen": "[]:9092"}, "listen"),
    ],
)
def test_bad_config_names_the_key(overrides: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load_config(overrides=overrides, environ={})


def test_bad_toml_is_a_readable_error(tmp_path: Path) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("num.partitions = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(toml), environ={})


def test_every_broker_and_topic_key_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [k for k in (*CONFIG_KEYS, *TOPIC_CONFIGS) if f"`{k}`" not in text]
    assert not missing


@pytest.mark.parametrize(
    "name,value",
    [
        ("retention.ms", "soon"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "compact"),
        ("message.timestamp.type", "Whenever"),
        ("no.such.config", "1"),
        ("segment.bytes", "3"),
    ],
)
def test_invalid_topic_configs(name: str, value: str) -> None:
    with pytest.raises(ApiError) as info:
        validate_overrides({name: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG and name in info.value.message


def test_effective_values_fall_back_to_broker_synonyms() -> None:
    broker = load_config(overrides={"log.retention.ms": "5000"}, environ={})
    settings = effective({"max.message.bytes": "100"}, broker)
    assert settings.max_message_bytes == 100 and settings.log.retention_ms == 5000
    sources = {e.name: e.source.name for e in describe({"max.message.bytes": "100"}, broker)}
    assert sources["max.message.bytes"] == "TOPIC_CONFIG"
    assert sources["retention.ms"] == "STATIC_BROKER_CONFIG"
    assert sources["segment.bytes"] == "DEFAULT_CONFIG"


def test_a_wildcard_address_is_refused_as_what_clients_are_given() -> None:
    """Regression (issue 17): --listen 0.0.0.0:9092 without --advertise handed 0.0.0.0 to
    every client in Metadata (Kafka refuses it in advertised.listeners too)."""
    for overrides in ({"listen": "0.0.0.0:9092"}, {"listen": "[::]:9092"}, {"advertise": "0.0.0.0:9092"}):
        with pytest.raises(ConfigError, match="not an address clients can connect to"):
            load_config(overrides=overrides, environ={})
    with pytest.raises(ConfigError, match="rpc.advertise"):
        load_config(overrides={"rpc.listen": "0.0.0.0:9093"}, environ={})
    fine = load_config(overrides={"listen": "0.0.0.0:9092", "advertise": "broker0.example:9092"}, environ={})
    assert fine.advertised == ("broker0.example", 9092)


def test_bracketed_ipv6_addresses_lose_their_brackets() -> None:
    """Regression (issue 17): `[::1]:9092` passed validation but the brackets reached bind()."""
    config = load_config(overrides={"listen": "[::1]:9092"}, environ={})
    assert config.advertised == ("::1", 9092)
    assert parse_host_port("[fe80::1]:9093", "listen") == ("fe80::1", 9093)
