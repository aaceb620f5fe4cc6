"""onceflow.config: properties parsing, Kafka keys and defaults, errors, topic configs, describe."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from onceflow import config as config_module
from onceflow.config import (
    BROKER_CONFIG_KEYS,
    CONFIG_DOCS,
    DYNAMIC_BROKER_KEYS,
    TOPIC_CONFIG_DOCS,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    ConfigSource,
    ConfigType,
    Listener,
    TopicConfig,
    describe_broker_config,
    describe_topic_config,
    load_broker_config,
    parse_properties,
)
from onceflow.config import server as config_server
from onceflow.config.broker import BROKER_KEYS_BY_NAME
from onceflow.config.topic import TOPIC_KEYS_BY_NAME

HOUR_MS = 3_600_000


def load(text: str = "", overrides: dict[str, str] | None = None) -> BrokerConfig:
    cfg, warnings = load_with_warnings(text, overrides)
    assert warnings == []
    return cfg


def load_with_warnings(
    text: str = "", overrides: dict[str, str] | None = None
) -> tuple[BrokerConfig, list[str]]:
    return config_module.broker_config_from_properties(
        {**parse_properties(text), **(overrides or {})}
    )


def by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {entry.name: entry for entry in entries}


# --------------------------------------------------------------------------------------------
# Defaults
# --------------------------------------------------------------------------------------------


def test_no_file_no_overrides_gives_kafka_defaults() -> None:
    cfg, warnings = load_broker_config(None, {})
    assert warnings == []
    assert cfg == BrokerConfig()
    assert cfg.node_id == 0
    assert cfg.log_dirs == ("./data",)
    assert cfg.listeners == (Listener("127.0.0.1", 9092),)
    assert cfg.effective_advertised_listeners() == (Listener("127.0.0.1", 9092),)
    assert cfg.num_partitions == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.default_replication_factor == 1
    assert cfg.message_max_bytes == 1_048_588
    assert cfg.socket_request_max_bytes == 104_857_600
    assert cfg.log_segment_bytes == 1 << 30
    assert cfg.log_roll_ms == 168 * HOUR_MS
    assert cfg.log_index_interval_bytes == 4096
    assert cfg.log_index_size_max_bytes == 10 * 1024 * 1024
    assert cfg.log_retention_ms == 168 * HOUR_MS
    assert cfg.log_retention_bytes == -1
    assert cfg.log_retention_check_interval_ms == 300_000
    assert cfg.log_cleanup_policy == ("delete",)
    assert cfg.log_cleaner_enable is True
    assert cfg.log_cleaner_delete_retention_ms == 86_400_000
    assert cfg.log_cleaner_min_compaction_lag_ms == 0
    assert cfg.log_cleaner_min_cleanable_ratio == 0.5
    assert cfg.log_cleaner_backoff_ms == 15_000
    assert cfg.onceflow_fsync_on_ack is True
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.offsets_retention_minutes == 10_080
    assert cfg.offsets_commit_timeout_ms == 5000
    assert cfg.group_min_session_timeout_ms == 6000
    assert cfg.group_max_session_timeout_ms == 1_800_000
    assert cfg.group_initial_rebalance_delay_ms == 3000
    assert cfg.transaction_state_log_num_partitions == 50
    assert cfg.transaction_max_timeout_ms == 900_000
    assert cfg.transactional_id_expiration_ms == 604_800_000
    assert cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms == 10_000
    assert cfg.transaction_remove_expired_transaction_cleanup_interval_ms == 3_600_000
    assert cfg.producer_id_expiration_ms == 86_400_000
    assert cfg.producer_id_expiration_check_interval_ms == 600_000
    assert cfg.delete_topic_enable is True
    assert cfg.queued_max_requests == 500


def test_topic_config_defaults_match_broker_defaults() -> None:
    assert BrokerConfig().topic_defaults() == TopicConfig()


def test_every_requested_kafka_key_is_known() -> None:
    wanted = {
        "node.id", "log.dirs", "log.dir", "listeners", "advertised.listeners", "num.partitions",
        "auto.create.topics.enable", "default.replication.factor", "message.max.bytes",
        "socket.request.max.bytes", "log.segment.bytes", "log.roll.ms", "log.roll.hours",
        "log.index.interval.bytes", "log.index.size.max.bytes", "log.retention.ms",
        "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
        "log.retention.check.interval.ms", "log.cleanup.policy", "log.cleaner.enable",
        "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.min.cleanable.ratio", "log.cleaner.backoff.ms",
        "log.flush.interval.messages", "log.flush.interval.ms", "onceflow.fsync.on.ack",
        "offsets.topic.num.partitions", "offsets.retention.minutes", "offsets.commit.timeout.ms",
        "group.min.session.timeout.ms", "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms", "transaction.state.log.num.partitions",
        "transaction.max.timeout.ms", "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
        "delete.topic.enable", "queued.max.requests",
    }  # fmt: skip
    assert wanted <= BROKER_CONFIG_KEYS
    assert {
        "cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
        "segment.index.bytes", "index.interval.bytes", "max.message.bytes",
        "delete.retention.ms", "min.compaction.lag.ms", "min.cleanable.dirty.ratio",
        "message.timestamp.type",
    } <= TOPIC_CONFIG_KEYS  # fmt: skip


def test_config_docs_cover_every_attribute_once() -> None:
    keys = [doc.key for doc in CONFIG_DOCS]
    assert len(keys) == len(set(keys)) == len(BROKER_CONFIG_KEYS)
    assert all(doc.doc.strip() for doc in CONFIG_DOCS)
    documented_attrs = {BROKER_KEYS_BY_NAME[key].attr for key in keys}
    fields = {f.name for f in dataclasses.fields(BrokerConfig)} - {
        "settings",
        "listener_settings",
        "dynamic_default",
        "dynamic_broker",
    }
    assert documented_attrs == fields
    defaults = {doc.key: doc.default for doc in CONFIG_DOCS}
    assert defaults["log.retention.ms"] == "604800000"
    assert defaults["log.retention.hours"] is None  # a synonym; log.retention.ms carries it
    assert defaults["onceflow.fsync.on.ack"] == "true"
    topic_keys = [doc.key for doc in TOPIC_CONFIG_DOCS]
    assert sorted(topic_keys) == sorted(TOPIC_CONFIG_KEYS)
    topic_fields = {f.name for f in dataclasses.fields(TopicConfig)} - {"overrides"}
    assert {TOPIC_KEYS_BY_NAME[k].attr for k in topic_keys} == topic_fields


# --------------------------------------------------------------------------------------------
# Properties syntax
# --------------------------------------------------------------------------------------------


def test_properties_separators_comments_and_blank_lines() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "   # indented comment\n"
        "\n"
        "   \t \n"
        "a=1\n"
        "b = 2\n"
        "c:3\n"
        "d : 4\n"
        "e 5\n"
        "   f\t=\t6\n"
        "g=\n"
        "h\n"
        "i=x=y:z\n"
        "j = value with spaces\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "",
        "h": "",
        "i": "x=y:z",
        "j": "value with spaces",
    }


def test_properties_continuations() -> None:
    text = (
        "log.dirs=/a,\\\n"
        "         /b,\\\n"
        "   /c\n"
        "two.backslashes=x\\\\\n"
        "next=1\n"
        "# comment ending in a backslash \\\n"
        "after.comment=2\n"
        "continued.into.hash=a\\\n"
        "#not a comment\n"
    )
    assert parse_properties(text) == {
        "log.dirs": "/a,/b,/c",
        "two.backslashes": "x\\",
        "next": "1",
        "after.comment": "2",
        "continued.into.hash": "a#not a comment",
    }


def test_properties_escapes_line_endings_and_duplicates() -> None:
    text = "k\\=ey=v\\u0041l\\tue\r\nsame=1\rsame=2\nspace\\ key=3\nlast=trailing\\"
    assert parse_properties(text) == {
        "k=ey": "vAl\tue",
        "same": "2",
        "space key": "3",
        "last": "trailing",
    }


def test_properties_malformed_unicode_escape_is_config_error() -> None:
    with pytest.raises(ConfigError, match="line-test:2"):
        parse_properties("ok=1\nbad=\\u12G4\n", "line-test")


def test_file_values_are_trimmed_and_typed(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "node.id = 7   \n"
        "log.dirs = /data/one , /data/two\n"
        "auto.create.topics.enable = FALSE\n"
        "log.cleaner.min.cleanable.ratio: 0.25\n"
        "listeners PLAINTEXT://0.0.0.0:19092\n"
    )
    cfg, warnings = load_broker_config(str(path), {})
    assert warnings == []
    assert cfg.node_id == 7
    assert cfg.log_dirs == ("/data/one", "/data/two")
    assert cfg.auto_create_topics_enable is False
    assert cfg.log_cleaner_min_cleanable_ratio == 0.25
    assert cfg.listeners == (Listener("0.0.0.0", 19092),)


def test_missing_or_unreadable_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.properties"):
        load_broker_config(str(tmp_path / "nope.properties"), {})
    with pytest.raises(ConfigError):
        load_broker_config(str(tmp_path), {})  # a directory


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.segment.bytes=1000\n")
    cfg, _ = load_broker_config(path, {"num.partitions": "8"})
    assert cfg.num_partitions == 8
    assert cfg.log_segment_bytes == 1000
    assert dict(cfg.settings)["num.partitions"] == "8"


def test_overrides_alone_without_a_file() -> None:
    cfg, warnings = load_broker_config(None, {"log.dirs": "/x", "onceflow.fsync.on.ack": "false"})
    assert warnings == []
    assert cfg.log_dirs == ("/x",)
    assert cfg.onceflow_fsync_on_ack is False


# --------------------------------------------------------------------------------------------
# Unknown and ignored keys
# --------------------------------------------------------------------------------------------


def test_unknown_key_gives_one_warning_naming_it() -> None:
    cfg, warnings = load_with_warnings("no.such.key=1\nnum.partitions=2\n", {"another.one": "x"})
    assert cfg.num_partitions == 2
    assert len(warnings) == 2
    assert "no.such.key" in warnings[0]
    assert "another.one" in warnings[1]


def test_unknown_key_warning_suggests_a_close_key() -> None:
    _, warnings = load_with_warnings("log.retention.hour=5\n")
    assert len(warnings) == 1
    assert "log.retention.hour" in warnings[0]
    assert "log.retention.hours" in warnings[0]


KRAFT_SERVER_PROPERTIES = """\
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_a_stock_kraft_server_properties_loads_without_warnings() -> None:
    cfg = load(KRAFT_SERVER_PROPERTIES)
    assert cfg.node_id == 1
    assert cfg.listeners == (Listener("", 9092),)  # the CONTROLLER listener is skipped
    assert cfg.effective_advertised_listeners() == (Listener("localhost", 9092),)
    assert cfg.log_dirs == ("/tmp/kraft-combined-logs",)
    assert cfg.log_retention_ms == 168 * HOUR_MS


# --------------------------------------------------------------------------------------------
# Bad values
# --------------------------------------------------------------------------------------------

BAD_VALUES = [
    ("node.id", "abc", "integer"),
    ("node.id", "-1", "at least 0"),
    ("node.id", "1.5", "integer"),
    ("node.id", "1_000", "integer"),
    ("node.id", "", "integer"),
    ("num.partitions", "0", "at least 1"),
    ("num.partitions", "99999999999", "32-bit"),
    ("log.segment.bytes", "-1", "at least 14"),
    ("log.segment.bytes", "1GB", "integer"),
    ("message.max.bytes", "-5", "at least 0"),
    ("socket.request.max.bytes", "0", "at least 1"),
    ("log.retention.bytes", "-2", "-1 (unlimited)"),
    ("log.retention.ms", "-7", "-1 (unlimited)"),
    ("log.retention.ms", "9223372036854775808", "64-bit"),
    ("log.retention.hours", "a week", "integer"),
    ("log.roll.hours", "0", "at least 1"),
    ("log.roll.ms", "0", "at least 1"),
    ("log.index.size.max.bytes", "3", "at least 4"),
    ("log.cleanup.policy", "remove", "compact"),
    ("log.cleanup.policy", "", "compact"),
    ("log.cleanup.policy", "delete,,compact", "empty"),
    ("log.cleaner.enable", "yes", "true or false"),
    ("auto.create.topics.enable", "1", "true or false"),
    ("onceflow.fsync.on.ack", "maybe", "true or false"),
    ("log.cleaner.min.cleanable.ratio", "1.5", "from 0 to 1"),
    ("log.cleaner.min.cleanable.ratio", "half", "decimal"),
    ("log.cleaner.min.cleanable.ratio", "NaN", "decimal"),
    ("default.replication.factor", "3", "single broker"),
    ("default.replication.factor", "0", "at least 1"),
    ("replica.lag.time.max.ms", "0", "at least 1"),
    ("unclean.leader.election.enable", "maybe", "true or false"),
    ("listeners", "localhost", "HOST:PORT"),
    ("listeners", "localhost:port", "HOST:PORT"),
    ("listeners", "PLAINTEXT://localhost:70000", "65535"),
    ("listeners", "http//x:1", "HOST:PORT"),
    ("listeners", "", "at least one"),
    ("ssl.keystore.type", "JKS", "PEM"),
    ("ssl.enabled.protocols", "TLSv1.1", "TLSv1.2"),
    ("authorizer.class.name", "com.example.Custom", "built-in"),
    ("super.users", "admin", "User:"),
    ("inter.broker.listener.name", "NOPE", "listener name defined"),
    ("listeners", "INTERNAL://localhost:9093", "no security protocol"),
    ("listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2", "each listener name once"),
    ("advertised.listeners", "OTHER://host:1", "listener names defined in listeners"),
    ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092", "not a wildcard"),
    ("advertised.listeners", "PLAINTEXT://host:0", "port from 1"),
    ("listener.security.protocol.map", "PLAINTEXT:TLS", "NAME:PROTOCOL"),
    ("listener.security.protocol.map", "PLAINTEXT", "NAME:PROTOCOL"),
    ("log.dirs", "", "at least one"),
    ("log.dirs", "/a,,/b", "empty"),
    ("compression.type", "brotli", "one of"),
    ("log.message.timestamp.type", "BrokerTime", "CreateTime"),
    ("transaction.max.timeout.ms", "0", "at least 1"),
    ("group.min.session.timeout.ms", "-1", "at least 0"),
    ("queued.max.requests", "0", "at least 1"),
    ("group.consumer.migration.policy", "sideways", "disabled, upgrade, downgrade"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_VALUES)
def test_bad_value_is_config_error_naming_key_value_and_expectation(
    key: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, {key: value})
    message = str(caught.value)
    assert key in message
    assert repr(value) in message
    assert "expected" in message
    assert expected in message
    assert caught.value.key == key


@pytest.mark.parametrize(
    ("overrides", "key", "expected"),
    [
        ({"listeners": "SSL://localhost:9093"}, "ssl.keystore.location", "PEM key and certificate"),
        (
            {"listeners": "SASL_PLAINTEXT://localhost:9093"},
            "sasl.enabled.mechanisms",
            "mechanisms Onceflow supports",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
            "sasl.enabled.mechanisms",
            "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            {"listeners": "PLAINTEXT://h:1", "listener.name.plaintext.log.dirs": "/x"},
            "listener.name.plaintext.log.dirs",
            "ssl.*, sasl.*",
        ),
        (
            {"listeners": "SSL://h:1", "listener.name.ssl.ssl.client.auth": "always"},
            "ssl.client.auth",
            "one of none, requested, required",
        ),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
            "security.inter.broker.protocol",
            "not set together",
        ),
    ],
)
def test_what_a_listener_security_protocol_needs(
    overrides: dict[str, str], key: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
        load_broker_config(None, overrides)
    assert caught.value.key == key


def test_security_keys_per_listener_and_secrets_never_shown() -> None:
    config, warnings = load_broker_config(
        None,
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093",
            "ssl.keystore.location": "/etc/broker.pem",
            "ssl.key.password": "key-secret",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "scram-sha-256,PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": 'x required user_a="pw";',
            "inter.broker.listener.name": "sasl_ssl",
        },
    )
    assert warnings == []
    assert config.security_protocol("sasl_ssl") == "SASL_SSL"
    assert config.listener_value("SASL_SSL", "sasl.enabled.mechanisms") == (
        "SCRAM-SHA-256",
        "PLAIN",
    )
    assert config.listener_value("PLAINTEXT", "sasl.enabled.mechanisms") == ("SCRAM-SHA-512",)
    assert config.jaas_config("SASL_SSL", "PLAIN") == 'x required user_a="pw";'
    assert config.jaas_config("SASL_SSL", "SCRAM-SHA-256") is None
    assert config.inter_broker_listener().name == "SASL_SSL"
    entries = {entry.name: entry for entry in describe_broker_config(config)}
    assert entries["ssl.key.password"].is_sensitive
    assert entries["ssl.key.password"].value is None
    assert all(s.value is None for s in entries["ssl.key.password"].synonyms)
    assert "key-secret" not in repr(config.settings)
    assert "pw" not in repr(config.settings)


def test_bad_value_in_a_file_is_config_error(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.segment.bytes=lots\n")
    with pytest.raises(ConfigError, match=r"'lots'.*log\.segment\.bytes") as caught:
        load_broker_config(path, {})
    assert str(path) in str(caught.value)
    assert caught.value.key == "log.segment.bytes"


def test_cross_key_rules() -> None:
    with pytest.raises(ConfigError, match=r"group\.min\.session\.timeout\.ms"):
        load(overrides={"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"})
    with pytest.raises(ConfigError, match=r"log\.cleaner\.min\.compaction\.lag\.ms"):
        load(
            overrides={
                "log.cleaner.min.compaction.lag.ms": "10",
                "log.cleaner.max.compaction.lag.ms": "5",
            }
        )
    with pytest.raises(ConfigError, match=r"broker\.id"):
        load(overrides={"node.id": "1", "broker.id": "2"})
    # Kafka's: a follower's fetch is parked no longer than its lag time or socket timeout.
    with pytest.raises(ConfigError, match=r"replica\.fetch\.wait\.max\.ms.*replica\.lag"):
        load(overrides={"replica.fetch.wait.max.ms": "2000", "replica.lag.time.max.ms": "1000"})
    with pytest.raises(ConfigError, match=r"replica\.fetch\.wait\.max\.ms.*socket"):
        load(overrides={"replica.fetch.wait.max.ms": "2000", "replica.socket.timeout.ms": "1000"})
    load(overrides={"replica.fetch.wait.max.ms": "1000", "replica.lag.time.max.ms": "1000"})
    with pytest.raises(ConfigError, match="listeners"):
        load(
            overrides={"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER"}
        )


def test_migration_policy_defaults_to_bidirectional_and_ignores_case() -> None:
    # Kafka 4.x's default; its validator (CaseInsensitiveValidString) takes any case.
    assert load_broker_config(None, {})[0].group_consumer_migration_policy == "bidirectional"
    cfg, _ = load_broker_config(None, {"group.consumer.migration.policy": " Upgrade "})
    assert cfg.group_consumer_migration_policy == "upgrade"
    with pytest.raises(ConfigError, match=r"group\.consumer\.migration\.policy"):
        BrokerConfig(group_consumer_migration_policy="both")


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"default\.replication\.factor"):
        BrokerConfig(default_replication_factor=2)
    with pytest.raises(ConfigError, match=r"log\.retention\.ms"):
        BrokerConfig(log_retention_ms=-3)
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        TopicConfig(segment_bytes=0)


# --------------------------------------------------------------------------------------------
# Synonyms and precedence
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "expected_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": "2"}, 2 * HOUR_MS),
        ({"log.retention.minutes": "3"}, 3 * 60_000),
        ({"log.retention.ms": "4"}, 4),
        ({"log.retention.hours": "2", "log.retention.minutes": "3"}, 3 * 60_000),
        ({"log.retention.hours": "2", "log.retention.ms": "4"}, 4),
        ({"log.retention.minutes": "3", "log.retention.ms": "4"}, 4),
        ({"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "4"}, 4),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1", "log.retention.hours": "5"}, -1),
    ],
)
def test_retention_precedence_ms_over_minutes_over_hours(
    settings: dict[str, str], expected_ms: int
) -> None:
    assert load(overrides=settings).log_retention_ms == expected_ms


def test_precedence_holds_across_file_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.retention.ms=1000\n")
    cfg, _ = load_broker_config(path, {"log.retention.hours": "1"})
    assert cfg.log_retention_ms == 1000  # ms still wins: precedence is by key, not by origin


def test_roll_hours_and_log_dir_synonyms() -> None:
    assert load(overrides={"log.roll.hours": "1"}).log_roll_ms == HOUR_MS
    assert load(overrides={"log.roll.hours": "1", "log.roll.ms": "5"}).log_roll_ms == 5
    assert load(overrides={"log.roll.jitter.hours": "1"}).log_roll_jitter_ms == HOUR_MS
    assert load(overrides={"log.dir": "/legacy"}).log_dirs == ("/legacy",)
    assert load(overrides={"log.dir": "/legacy", "log.dirs": "/new"}).log_dirs == ("/new",)
    assert load(overrides={"broker.id": "4"}).node_id == 4
    assert load(overrides={"broker.id": "4", "node.id": "4"}).node_id == 4


# --------------------------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", Listener("127.0.0.1", 9092, "PLAINTEXT")),
        ("localhost:0", Listener("localhost", 0, "PLAINTEXT")),
        ("PLAINTEXT://broker-1.example.com:9092", Listener("broker-1.example.com", 9092)),
        ("plaintext://host:1", Listener("host", 1, "PLAINTEXT")),
        ("PLAINTEXT://:9092", Listener("", 9092)),
        (":9092", Listener("", 9092)),
        ("[::1]:9092", Listener("::1", 9092)),
        ("PLAINTEXT://[::]:9092", Listener("::", 9092)),
    ],
)
def test_listener_forms(text: str, expected: Listener) -> None:
    assert Listener.parse(text) == expected
    cfg = load(overrides={"listeners": text})
    assert cfg.listeners == (expected,)


def test_listener_rendering() -> None:
    assert str(Listener("h", 1)) == "PLAINTEXT://h:1"
    assert Listener("h", 1).address == "h:1"
    assert Listener("::1", 9092).address == "[::1]:9092"
    assert Listener.parse(str(Listener("::1", 9092))) == Listener("::1", 9092)


def test_advertised_defaults_to_listeners_with_hostname_for_wildcards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config_server, "_local_hostname", lambda: "myhost")
    cfg = load(overrides={"listeners": "0.0.0.0:9092"})
    assert cfg.advertised_listeners == ()
    assert cfg.effective_advertised_listeners() == (Listener("myhost", 9092),)
    assert load(overrides={"listeners": "10.1.2.3:9092"}).effective_advertised_listeners() == (
        Listener("10.1.2.3", 9092),
    )
    cfg = load(overrides={"listeners": ":9092", "advertised.listeners": "PLAINTEXT://:19092"})
    assert cfg.effective_advertised_listeners() == (Listener("myhost", 19092),)


def test_several_listeners_and_advertised_lookup_by_name() -> None:
    cfg = load(
        overrides={
            "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9093",
            "advertised.listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://kafka.example.com:9093",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        }
    )
    assert [lis.name for lis in cfg.listeners] == ["INTERNAL", "EXTERNAL"]
    assert cfg.advertised_listener_for("EXTERNAL") == Listener(
        "kafka.example.com", 9093, "EXTERNAL"
    )
    assert cfg.advertised_listener_for("internal") == Listener("127.0.0.1", 9092, "INTERNAL")


# --------------------------------------------------------------------------------------------
# Topic configs
# --------------------------------------------------------------------------------------------


def test_topic_defaults_follow_the_broker() -> None:
    cfg = load(
        overrides={
            "log.retention.hours": "1",
            "log.segment.bytes": "4096",
            "log.cleanup.policy": "compact",
            "message.max.bytes": "2000",
            "log.index.size.max.bytes": "1024",
            "log.cleaner.min.cleanable.ratio": "0.1",
        }
    )
    topic = cfg.topic_defaults()
    assert topic.retention_ms == HOUR_MS
    assert topic.segment_bytes == 4096
    assert topic.cleanup_policy == ("compact",)
    assert topic.compact_enabled and not topic.delete_enabled
    assert topic.max_message_bytes == 2000
    assert topic.segment_index_bytes == 1024
    assert topic.min_cleanable_dirty_ratio == 0.1
    assert topic.overrides == ()


def test_topic_overrides_apply_and_normalise() -> None:
    topic = (
        BrokerConfig()
        .topic_defaults()
        .with_overrides(
            {
                "cleanup.policy": " delete , compact ",
                "retention.ms": " 1000 ",
                "segment.bytes": "1048576",
                "min.cleanable.dirty.ratio": "0.25",
                "message.timestamp.type": "LogAppendTime",
            }
        )
    )
    assert topic.cleanup_policy == ("compact", "delete")
    assert topic.compact_enabled and topic.delete_enabled
    assert topic.retention_ms == 1000
    assert topic.segment_bytes == 1 << 20
    assert topic.min_cleanable_dirty_ratio == 0.25
    assert topic.message_timestamp_type == "LogAppendTime"
    assert topic.overrides_dict() == {
        "cleanup.policy": "compact,delete",
        "min.cleanable.dirty.ratio": "0.25",
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "1000",
        "segment.bytes": "1048576",
    }


def test_topic_overrides_accumulate_and_later_ones_win() -> None:
    topic = (
        TopicConfig()
        .with_overrides({"retention.ms": "1"})
        .with_overrides({"retention.ms": "2", "segment.ms": "3"})
    )
    assert topic.retention_ms == 2
    assert topic.overrides_dict() == {"retention.ms": "2", "segment.ms": "3"}


def test_topic_overrides_round_trip_through_json() -> None:
    broker = load(overrides={"log.retention.hours": "5"})
    topic = broker.topic_config(
        {
            "cleanup.policy": "compact,delete",
            "retention.bytes": "-1",
            "max.message.bytes": "123456",
            "flush.ms": "1000",
        }
    )
    persisted = json.dumps(topic.overrides_dict())
    rebuilt = broker.topic_config(json.loads(persisted))
    assert rebuilt == topic
    assert hash(rebuilt) == hash(topic)


def test_persisted_overrides_pick_up_new_broker_defaults() -> None:
    overrides = BrokerConfig().topic_config({"segment.bytes": "65536"}).overrides_dict()
    restarted = load(overrides={"log.retention.ms": "42"}).topic_config(overrides)
    assert restarted.segment_bytes == 65536
    assert restarted.retention_ms == 42


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("retention.ms", "forever", "integer"),
        ("retention.ms", "-2", "-1 (unlimited)"),
        ("retention.bytes", "-9", "-1 (unlimited)"),
        ("segment.bytes", "0", "at least 14"),
        ("segment.ms", "0", "at least 1"),
        ("segment.index.bytes", "2", "at least 4"),
        ("index.interval.bytes", "-1", "at least 0"),
        ("max.message.bytes", "-1", "at least 0"),
        ("delete.retention.ms", "-1", "at least 0"),
        ("min.compaction.lag.ms", "x", "integer"),
        ("min.cleanable.dirty.ratio", "2", "from 0 to 1"),
        ("cleanup.policy", "compact,purge", "compact"),
        ("message.timestamp.type", "createtime", "CreateTime"),
        ("compression.type", "lzma", "one of"),
        ("min.insync.replicas", "0", "at least 1"),
    ],
)
def test_bad_topic_override_is_config_error(key: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        TopicConfig().with_overrides({key: value})
    assert key in str(caught.value)
    assert repr(value) in str(caught.value)
    assert expected in str(caught.value)
    assert caught.value.key == key


def test_unknown_or_null_topic_override_is_config_error() -> None:
    with pytest.raises(ConfigError, match=r"retention\.hours") as caught:
        TopicConfig().with_overrides({"retention.hours": "1"})
    assert caught.value.key == "retention.hours"
    with pytest.raises(ConfigError, match=r"retention\.ms"):
        TopicConfig().with_overrides({"retention.ms": None})


def test_topic_compaction_lag_rule() -> None:
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms"):
        TopicConfig().with_overrides({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_failed_override_leaves_the_original_untouched() -> None:
    topic = TopicConfig().with_overrides({"retention.ms": "5"})
    with pytest.raises(ConfigError):
        topic.with_overrides({"segment.ms": "1", "segment.bytes": "nope"})
    assert topic.overrides_dict() == {"retention.ms": "5"}


# --------------------------------------------------------------------------------------------
# DescribeConfigs
# --------------------------------------------------------------------------------------------


def test_describe_topic_sources() -> None:
    broker = load(overrides={"log.segment.bytes": "2048", "log.retention.hours": "24"})
    topic = broker.topic_config({"cleanup.policy": "compact", "retention.ms": "1000"})
    entries = by_name(describe_topic_config(topic, topic.overrides_dict(), broker=broker))
    assert set(entries) == TOPIC_CONFIG_KEYS
    assert all(not entry.read_only and not entry.is_sensitive for entry in entries.values())

    overridden = entries["retention.ms"]
    assert overridden.value == "1000"
    assert overridden.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert int(overridden.source) == 1
    assert overridden.is_default is False
    assert [(s.name, s.value, s.source) for s in overridden.synonyms] == [
        ("retention.ms", "1000", 1),
        ("log.retention.hours", "24", 4),
        ("log.retention.ms", "604800000", 5),
    ]

    from_broker = entries["segment.bytes"]
    assert from_broker.value == "2048"
    assert from_broker.source == ConfigSource.STATIC_BROKER_CONFIG
    assert int(from_broker.source) == 4
    assert from_broker.is_default is False
    assert [s.source for s in from_broker.synonyms] == [4, 5]

    default = entries["segment.ms"]
    assert default.value == "604800000"
    assert default.source == ConfigSource.DEFAULT_CONFIG
    assert int(default.source) == 5
    assert default.is_default is True
    assert default.synonyms == (("log.roll.ms", "604800000", ConfigSource.DEFAULT_CONFIG),)

    assert entries["cleanup.policy"].value == "compact"
    assert entries["cleanup.policy"].config_type == ConfigType.LIST
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["retention.bytes"].value == "-1"


def test_describe_topic_without_broker_uses_recorded_overrides() -> None:
    topic = TopicConfig().with_overrides({"segment.bytes": "4096"})
    entries = by_name(describe_topic_config(topic))
    assert entries["segment.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG


def test_describe_broker_sources_and_rendering() -> None:
    cfg = load(
        overrides={
            "log.retention.hours": "24",
            "auto.create.topics.enable": "false",
            "log.dirs": "/a, /b",
        }
    )
    explicit = {"log.retention.hours", "auto.create.topics.enable", "log.dirs"}
    entries = by_name(describe_broker_config(cfg, explicit))
    assert set(entries) == BROKER_CONFIG_KEYS
    assert all(
        entry.read_only == (name not in DYNAMIC_BROKER_KEYS) for name, entry in entries.items()
    )

    auto = entries["auto.create.topics.enable"]
    assert (auto.value, auto.source, auto.is_default) == ("false", 4, False)
    assert auto.config_type == ConfigType.BOOLEAN
    assert entries["log.dirs"].value == "/a,/b"
    assert entries["delete.topic.enable"].value == "true"
    assert entries["log.cleaner.min.cleanable.ratio"].value == "0.5"

    hours = entries["log.retention.hours"]
    assert (hours.value, hours.source) == ("24", ConfigSource.STATIC_BROKER_CONFIG)
    effective = entries["log.retention.ms"]
    assert effective.value == str(24 * HOUR_MS)
    assert effective.source == ConfigSource.STATIC_BROKER_CONFIG
    assert [(s.name, s.source) for s in effective.synonyms] == [
        ("log.retention.hours", 4),
        ("log.retention.ms", 5),
    ]
    minutes = entries["log.retention.minutes"]
    assert (minutes.value, minutes.source, minutes.is_default) == (None, 5, True)

    untouched = entries["num.partitions"]
    assert (untouched.value, untouched.source, untouched.is_default) == ("1", 5, True)
    assert entries["onceflow.fsync.on.ack"].value == "true"
    assert entries["listeners"].value == "PLAINTEXT://127.0.0.1:9092"


def test_describe_broker_defaults_to_the_keys_it_was_loaded_from() -> None:
    cfg = load(overrides={"num.partitions": "4"})
    entries = by_name(describe_broker_config(cfg))
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].value == "4"
    assert entries["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG


def test_settings_do_not_affect_equality() -> None:
    assert load(overrides={"num.partitions": "1"}) == BrokerConfig()
