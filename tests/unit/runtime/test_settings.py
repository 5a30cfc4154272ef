"""Settings: defaults, YAML file, environment overrides (prefix FAULT_AGENT_, nested with __), bad values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cli import main
from agent.settings import Settings, SettingsError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("FAULT_AGENT_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = load_settings()
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert s.policy.grace_over_time_s == 900
    assert s.leader.lease_duration_s == 15
    assert s.leader.renew_deadline_s == 10
    assert s.leader.retry_period_s == 2
    assert s.detect.node_not_ready_grace_s < 40  # far below Kubernetes' own 40 s + 300 s
    assert s.policy.dry_run is False


@pytest.mark.parametrize(
    ("env", "value", "read"),
    [
        pytest.param(
            "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS",
            "k1:9093,k2:9093",
            lambda s: s.kafka.bootstrap_servers,
            id="nested-string",
        ),
        pytest.param("FAULT_AGENT_POLICY__GRACE_OVER_TIME_S", "30", lambda s: s.policy.grace_over_time_s, id="float"),
        pytest.param("FAULT_AGENT_POLICY__DRY_RUN", "true", lambda s: s.policy.dry_run, id="bool"),
        pytest.param("FAULT_AGENT_CLUSTER_NAME", "prod-a", lambda s: s.cluster_name, id="top-level"),
        pytest.param("FAULT_AGENT_KUBE__NAMESPACES", '["train","eval"]', lambda s: s.kube.namespaces, id="list"),
    ],
)
def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, env: str, value: str, read: object) -> None:
    monkeypatch.setenv(env, value)
    got = read(load_settings())  # type: ignore[operator]
    expected = {"30": 30.0, "true": True, '["train","eval"]': ["train", "eval"]}.get(value, value)
    assert got == expected


def test_yaml_file_then_environment_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("cluster_name: from-file\nkafka:\n  linger_ms: 20\n  faults_topic: file.faults\n")
    monkeypatch.setenv("FAULT_AGENT_KAFKA__LINGER_MS", "7")
    s = load_settings(cfg)
    assert s.cluster_name == "from-file"
    assert s.kafka.faults_topic == "file.faults"
    assert s.kafka.linger_ms == 7  # the environment wins over the file
    assert s.kafka.recoveries_topic == Settings().kafka.recoveries_topic  # untouched default


def test_config_file_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("cluster_name: via-env-file\n")
    monkeypatch.setenv("FAULT_AGENT_CONFIG", str(cfg))
    assert load_settings().cluster_name == "via-env-file"


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        pytest.param("FAULT_AGENT_KAFKA__LINGER_MS", "soon", "kafka.linger_ms", id="not-an-int"),
        pytest.param("FAULT_AGENT_POLICY__GRACE_OVER_TIME_S", "1", "policy.grace_over_time_s", id="below-minimum"),
        pytest.param("FAULT_AGENT_SERVER__PORT", "70000", "server.port", id="port-out-of-range"),
        pytest.param("FAULT_AGENT_KAFKA__SECURITY_PROTOCOL", "TLS", "kafka.security_protocol", id="not-a-choice"),
        pytest.param("FAULT_AGENT_CLUSTER_NAME", "", "cluster_name", id="empty"),
        # names the admission policy and the apiserver would refuse (the agent started, then every write failed)
        pytest.param("FAULT_AGENT_POLICY__TAINT_KEY", "bad key!", "policy.taint_key", id="taint-key"),
        pytest.param("FAULT_AGENT_POLICY__TAINT_KEY", "Bad_Prefix/fault", "policy.taint_key", id="taint-prefix"),
        pytest.param("FAULT_AGENT_POLICY__BREAKER_CONFIGMAP", "Bad_Name", "policy.breaker_configmap", id="breaker-cm"),
        pytest.param("FAULT_AGENT_LEADER__NAME", "UPPER case", "leader.name", id="lease-name"),
        # no resource name: no pod's chips known, so no chip fault would ever reach a job
        pytest.param("FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES", "[]", "kube.npu_resource_names", id="no-npu-resource"),
        pytest.param("FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES", '[""]', "kube.npu_resource_names", id="empty-resource"),
        pytest.param(
            "FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES", '["Ascend910"]', "kube.npu_resource_names", id="no-domain"
        ),
    ],
)
def test_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    message = str(err.value)
    assert f"'{named}'" in message
    assert env in message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        pytest.param("kafka: [1, 2\n", "not valid YAML", id="broken-yaml"),
        pytest.param("- just\n- a list\n", "top level must be a mapping", id="not-a-mapping"),
        pytest.param("kafka:\n  lingr_ms: 5\n", "'kafka.lingr_ms'", id="unknown-key"),
        pytest.param("policy:\n  restart_burst: -1\n", "'policy.restart_burst'", id="negative"),
    ],
)
def test_bad_file(tmp_path: Path, content: str, fragment: str) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(content)
    with pytest.raises(SettingsError, match=r"agent\.yaml") as err:
        load_settings(cfg)
    assert fragment in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")


def test_cli_without_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "fault-agent" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        pytest.param({"FAULT_AGENT_BOGUS": "1"}, "FAULT_AGENT_BOGUS: names no setting", id="unknown-top-level"),
        pytest.param(
            {"FAULT_AGENT_KAFKA_LINGER_MS": "5"},
            "FAULT_AGENT_KAFKA_LINGER_MS: names no setting",
            id="single-underscore",
        ),
        pytest.param(
            {"FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": "b:9092", "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS__X": "x"},
            "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS__X: names no setting",
            id="level-below-a-setting",
        ),
        pytest.param({"FAULT_AGENT_KAFKA__BOOTSTRAPSERVERS": "b:9092"}, "names no setting", id="misspelled-setting"),
        pytest.param({"FAULT_AGENT_SERVER__PORT__X": "5"}, "FAULT_AGENT_SERVER__PORT__X: names no", id="port-x"),
        pytest.param({"FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": ""}, "expected host:port", id="bootstrap-empty"),
        pytest.param({"FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": "kafka"}, "expected host:port", id="bootstrap-no-port"),
        pytest.param({"FAULT_AGENT_LEADER__NAMESPACE": "Bad_NS!"}, "is a DNS label", id="namespace-not-dns"),
        pytest.param(
            {"FAULT_AGENT_KUBE__NAMESPACES": "a,b"},
            """FAULT_AGENT_KUBE__NAMESPACES: setting 'kube.namespaces' takes a JSON list""",
            id="list-not-json",
        ),
        pytest.param(
            {"FAULT_AGENT_KUBE": "x"}, "FAULT_AGENT_KUBE: setting 'kube' takes a JSON object", id="group-text"
        ),
        pytest.param(
            {"FAULT_AGENT_LEADER__RENEW_DEADLINE_S": "20"},
            "need retry_period_s < renew_deadline_s < lease_duration_s",
            id="renew-after-lease-expiry",
        ),
        pytest.param(
            {"FAULT_AGENT_KUBE__BACKOFF_INITIAL_S": "50", "FAULT_AGENT_KUBE__BACKOFF_MAX_S": "1"},
            "must not exceed backoff_max_s",
            id="backoff-inverted",
        ),
    ],
)
def test_environment_mistakes_are_named(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], fragment: str) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert fragment in str(err.value)


def test_testbed_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_TESTBED_DIR", "/tmp/x")
    monkeypatch.setenv("FAULT_AGENT_TESTBED_CACHE", "/tmp/y")
    assert load_settings().cluster_name == "default"


def test_binary_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SettingsError, match="not UTF-8 text"):
        load_settings(cfg)


def test_every_environment_mistake_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_NOPE", "1")
    monkeypatch.setenv("FAULT_AGENT_POLICY__RESUBMIT_LIMIT", "abc")
    monkeypatch.setenv("FAULT_AGENT_SERVER__PORT", "70000")
    with pytest.raises(SettingsError) as err:
        load_settings()
    text = str(err.value)
    for fragment in ("FAULT_AGENT_NOPE: names no setting", "policy.resubmit_limit", "server.port"):
        assert fragment in text
    assert os.environ["FAULT_AGENT_NOPE"] == "1"  # set aside while loading, put back after


def test_each_list_variable_that_is_not_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES", "huawei.com/Ascend910")
    monkeypatch.setenv("FAULT_AGENT_KUBE__NAMESPACES", "train, eval")
    monkeypatch.setenv("FAULT_AGENT_SERVER__PORT", "70000")
    with pytest.raises(SettingsError) as err:
        load_settings()
    lines = str(err.value).splitlines()[1:]
    assert len(lines) == 3, lines
    assert lines[0] == (
        "  FAULT_AGENT_KUBE__NAMESPACES: setting 'kube.namespaces' takes a JSON list, e.g. '[\"a\",\"b\"]'; "
        """got 'train, eval', which is not JSON (write FAULT_AGENT_KUBE__NAMESPACES='["train","eval"]')"""
    )
    assert lines[1].startswith("  FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES: setting 'kube.npu_resource_names' takes")
    assert lines[1].endswith("""(write FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES='["huawei.com/Ascend910"]')""")
    assert "server.port" in lines[2]
    monkeypatch.setenv("FAULT_AGENT_KUBE__NPU_RESOURCE_NAMES", '["huawei.com/Ascend910"]')
    monkeypatch.setenv("FAULT_AGENT_KUBE__NAMESPACES", '["train","eval"]')
    monkeypatch.delenv("FAULT_AGENT_SERVER__PORT")
    settings = load_settings()
    assert settings.kube.npu_resource_names == ["huawei.com/Ascend910"]
    assert settings.kube.namespaces == ["train", "eval"]


def test_good_kafka_bootstrap_lists_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS", "kafka-0.kafka:9092, 10.0.0.5:9093")
    assert load_settings().kafka.bootstrap_servers == "kafka-0.kafka:9092, 10.0.0.5:9093"


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("FAULT_AGENT_POLICY__TAINT_KEY", "fault-agent.io/fault"),
        ("FAULT_AGENT_POLICY__TAINT_KEY", "quarantine"),
        ("FAULT_AGENT_POLICY__TAINT_KEY", "example.com/NPU_fault.v1"),
        ("FAULT_AGENT_POLICY__BREAKER_CONFIGMAP", "fault-agent.breaker"),
        ("FAULT_AGENT_LEADER__NAME", "fault-agent-leader"),
    ],
)
def test_valid_kubernetes_names_are_accepted(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    settings = load_settings()
    assert value in (settings.policy.taint_key, settings.policy.breaker_configmap, settings.leader.name)


def test_a_typo_in_the_file_names_the_nearest_setting_and_its_variable(tmp_path: Path) -> None:
    """Issue 41, 8: a YAML typo gave pydantic's 'Extra inputs are not permitted' and a variable name that does not
    exist (FAULT_AGENT_POLICY__BREKER_WINDOW_S); it names the setting meant now."""
    path = tmp_path / "agent.yaml"
    path.write_text("policy:\n  breker_window_s: 30\n", encoding="utf-8")
    with pytest.raises(SettingsError) as e:
        load_settings(path)
    text = str(e.value)
    assert "did you mean 'policy.breaker_window_s' [FAULT_AGENT_POLICY__BREAKER_WINDOW_S]" in text
    assert "Extra inputs" not in text
    assert "BREKER" not in text


def test_a_misspelled_variable_names_the_nearest_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_POLICY__DRYRUN", "true")
    with pytest.raises(SettingsError, match=r"did you mean FAULT_AGENT_POLICY__DRY_RUN \(policy.dry_run\)"):
        load_settings()
