"""`onceflow cluster`'s plan, without processes: the brokers' overrides and command lines,
cluster.json, the choice of ports; and ZooKeeper's zoo.cfg and install check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onceflow.cli.cluster import (
    assign_ports,
    bootstrap_servers,
    broker_overrides,
    cluster_document,
    plan_brokers,
    replication_overrides,
)
from onceflow.cli.common import CliError
from onceflow.cli.main import build_parser, main
from onceflow.cli.serve import build_serve_config
from onceflow.cluster.zk_server import (
    Peer,
    ZooKeeperNotInstalled,
    require_zookeeper,
    zoo_cfg,
)


@pytest.mark.parametrize(
    ("brokers", "expected"),
    [
        (1, ("1", "1", "1", "1")),
        (2, ("2", "2", "2", "2")),
        (3, ("3", "3", "3", "2")),
        (5, ("3", "3", "3", "2")),
    ],
)
def test_replication_factors_are_capped_to_the_broker_count(
    brokers: int, expected: tuple[str, ...]
) -> None:
    assert replication_overrides(brokers) == dict(
        zip(
            (
                "default.replication.factor",
                "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr",
            ),
            expected,
            strict=True,
        )
    )


def test_the_users_overrides_win_but_not_over_what_the_launcher_sets() -> None:
    overrides = broker_overrides(2, "127.0.0.1:2181", {"min.insync.replicas": "2"})
    assert overrides["zookeeper.connect"] == "127.0.0.1:2181"
    assert overrides["min.insync.replicas"] == "2"
    assert (
        broker_overrides(2, "zk:1", {"default.replication.factor": "1"})[
            "default.replication.factor"
        ]
        == "1"
    )
    for key in ("node.id", "broker.id", "listeners", "log.dirs", "zookeeper.connect"):
        with pytest.raises(CliError, match=f"--override {key} is set by onceflow cluster"):
            broker_overrides(2, "zk:1", {key: "x"})


def test_each_broker_gets_its_id_data_dir_port_and_a_command_that_loads(tmp_path: Path) -> None:
    root = tmp_path / "c"
    overrides = broker_overrides(3, "127.0.0.1:2181", {"num.partitions": "4"})
    specs = plan_brokers(root, [9101, 9102, 9103], overrides, python="/py")
    assert [s.broker_id for s in specs] == [1, 2, 3]
    assert bootstrap_servers(specs) == "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103"
    second = specs[1]
    assert second.data_dir == str(root / "broker-2")
    assert second.log == str(root / "broker-2" / "broker.log")
    assert second.command[:4] == ("/py", "-m", "onceflow", "serve")
    # The command is `onceflow serve`'s: parse it as serve does and load the config.
    args = build_parser().parse_args(list(second.command[3:]))
    config, warnings = build_serve_config(args)
    assert warnings == []
    assert config.node_id == 2
    assert config.log_dirs == (str(root / "broker-2"),)
    assert config.listeners[0].port == 9102
    assert config.zookeeper_connect == "127.0.0.1:2181"
    assert config.default_replication_factor == 3
    assert config.transaction_state_log_min_isr == 2
    assert config.num_partitions == 4


def test_a_relative_data_dir_becomes_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (spec,) = plan_brokers(Path("rel"), [9101], {}, python="/py")
    assert spec.data_dir == str(tmp_path / "rel" / "broker-1")
    assert str(tmp_path / "rel" / "broker-1") in spec.command


def test_cluster_json_names_zookeeper_and_every_broker_with_its_pid_and_command(
    tmp_path: Path,
) -> None:
    specs = plan_brokers(tmp_path, [9101, 9102], {"zookeeper.connect": "zk:1"}, python="/py")
    zookeeper = {"connect": "127.0.0.1:2181", "pid": 10, "command": ["java"]}
    document = cluster_document(
        state="running", launcher_pid=9, zookeeper=zookeeper, brokers=specs, pids={1: 11, 2: None}
    )
    assert json.loads(json.dumps(document)) == document  # plain JSON
    assert document["bootstrap_servers"] == "127.0.0.1:9101,127.0.0.1:9102"
    assert document["zookeeper"] == zookeeper
    first, second = document["brokers"]
    assert first == {
        "id": 1,
        "host": "127.0.0.1",
        "port": 9101,
        "address": "127.0.0.1:9101",
        "data_dir": str(tmp_path / "broker-1"),
        "pid": 11,
        "log": str(tmp_path / "broker-1" / "broker.log"),
        "command": list(specs[0].command),
    }
    assert second["pid"] is None


def test_ports_explicit_then_last_runs_if_free_then_fresh_and_never_twice() -> None:
    busy = {9000}
    fresh = iter([7001, 7001, 7002, 7003]).__next__
    ports = assign_ports(
        [None, 8001, None, None],
        [9000, None, 9001, 7001],  # 9000 is busy; 7001 comes fresh first
        lambda p: p not in busy,
        fresh,
    )
    assert ports == [7001, 8001, 9001, 7002]
    with pytest.raises(CliError, match="port 9000 is in use"):
        assign_ports([9000], [None], lambda p: p not in busy, fresh)
    with pytest.raises(CliError, match="port 8001 is in use"):
        assign_ports([8001, 8001], [None, None], lambda p: True, fresh)


def test_brokers_below_one_is_an_error_with_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "--brokers", "0", "--data-dir", str(tmp_path / "c")]) == 1
    assert capsys.readouterr().err == "onceflow: error: --brokers must be at least 1, got 0\n"
    assert not (tmp_path / "c").exists()


# ---- ZooKeeper ------------------------------------------------------------------------------


def test_zoo_cfg_standalone_and_in_an_ensemble(tmp_path: Path) -> None:
    standalone = zoo_cfg(tmp_path / "data", 2181, tick_ms=200)
    assert "tickTime=200\n" in standalone
    assert f"dataDir={tmp_path / 'data'}\n" in standalone
    assert "clientPort=2181\n" in standalone
    assert "clientPortAddress=127.0.0.1\n" in standalone
    assert "admin.enableServer=false\n" in standalone
    assert "ruok" in standalone and "srvr" in standalone
    assert "server." not in standalone
    peers = [Peer(1, "127.0.0.1", 3001, 4001), Peer(2, "127.0.0.1", 3002, 4002)]
    ensemble = zoo_cfg(tmp_path, 2181, peers=peers)
    assert "server.1=127.0.0.1:3001:4001\nserver.2=127.0.0.1:3002:4002\n" in ensemble


def test_a_missing_zookeeper_or_java_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZOOKEEPER_JAR", str(tmp_path / "none.jar"))
    with pytest.raises(ZooKeeperNotInstalled) as missing_jar:
        require_zookeeper()
    assert "apt-get install zookeeper" in str(missing_jar.value)
    assert "ZOOKEEPER_JAR" in str(missing_jar.value)
    assert "\n" not in str(missing_jar.value)

    jar = tmp_path / "zookeeper.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("ZOOKEEPER_JAR", str(jar))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ZooKeeperNotInstalled, match="java") as missing_java:
        require_zookeeper()
    assert "apt-get install zookeeper" in str(missing_java.value)
