"""config/agent.yaml documents every setting with its default; `fault-agent settings` prints effective settings."""

from __future__ import annotations

import argparse
import io
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from agent import cli
from agent.cli.settings import REDACTED, default_settings, render_yaml
from agent.settings import ENV_PREFIX, Settings, load_settings

AGENT_YAML = Path(__file__).resolve().parents[3] / "config" / "agent.yaml"
REGENERATE = "fault-agent settings --defaults --comments > config/agent.yaml"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)


def _field_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for name, info in Settings.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths += [(name, sub) for sub in ann.model_fields]
        else:
            paths.append((name,))
    return paths


def _has(data: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_setting_appears_in_agent_yaml() -> None:
    data = yaml.safe_load(AGENT_YAML.read_text())
    missing = [".".join(p) for p in _field_paths() if not _has(data, p)]
    assert missing == [], f"config/agent.yaml lacks {missing}; regenerate it with: {REGENERATE}"


def test_agent_yaml_has_no_unknown_settings() -> None:
    data = yaml.safe_load(AGENT_YAML.read_text())
    known = set(_field_paths())
    present = {(g, k) for g, v in data.items() if isinstance(v, dict) for k in v} | {
        (k,) for k, v in data.items() if not isinstance(v, dict)
    }
    assert sorted(".".join(p) for p in present - known) == []


def test_agent_yaml_loads_and_equals_defaults() -> None:
    loaded = load_settings(AGENT_YAML)
    assert loaded.model_dump() == default_settings().model_dump(), f"stale defaults; regenerate: {REGENERATE}"


def test_every_setting_is_commented_with_its_env_var() -> None:
    lines = AGENT_YAML.read_text().splitlines()
    undocumented = []
    for path in _field_paths():
        key = path[-1]
        indent = "  " if len(path) == 2 else ""
        env = ENV_PREFIX + "__".join(p.upper() for p in path)
        idx = next(
            (
                i
                for i, line in enumerate(lines)
                if re.match(rf"^{indent}{key}:", line)
                and (len(path) == 1 or any(lines[j] == f"{path[0]}:" for j in range(i)))
            ),
            None,
        )
        if idx is None:
            continue  # reported by test_every_setting_appears_in_agent_yaml
        if lines[idx - 1].strip() != f"# env {env}" or not lines[idx - 2].strip().startswith("#"):
            undocumented.append(".".join(path))
    assert undocumented == []


def test_defaults_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_CLUSTER_NAME", "prod-east")
    monkeypatch.setenv("FAULT_AGENT_KAFKA__ENABLED", "false")
    d = default_settings()
    assert d.cluster_name == "default"
    assert d.kafka.enabled is True


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("env", "file_text", "path", "expected"),
    [
        pytest.param({}, None, ("server", "port"), 8080, id="default"),
        pytest.param({"FAULT_AGENT_SERVER__PORT": "9100"}, None, ("server", "port"), 9100, id="env-wins"),
        pytest.param({}, "server:\n  port: 9200\n", ("server", "port"), 9200, id="file"),
        pytest.param(
            {"FAULT_AGENT_SERVER__PORT": "9300"},
            "server:\n  port: 9200\n",
            ("server", "port"),
            9300,
            id="env-over-file",
        ),
        pytest.param({}, "cluster_name: lab\n", ("cluster_name",), "lab", id="top-level"),
        pytest.param(
            {"FAULT_AGENT_KUBE__NAMESPACES": '["a","b"]'}, None, ("kube", "namespaces"), ["a", "b"], id="list"
        ),
    ],
)
def test_settings_command_prints_effective_values(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    file_text: str | None,
    path: tuple[str, ...],
    expected: object,
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    argv = ["settings"]
    if file_text is not None:
        cfg = tmp_path / "agent.yaml"
        cfg.write_text(file_text)
        argv = ["--config", str(cfg), "settings"]
    code, out, err = _run(argv)
    assert (code, err) == (0, "")
    node: Any = yaml.safe_load(out)
    for part in path:
        node = node[part]
    assert node == expected


def test_settings_output_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_AGENT_POLICY__DRY_RUN", "true")
    monkeypatch.setenv("FAULT_AGENT_DETECT__PROBLEM_CONDITION_TYPES", '["X"]')
    effective = load_settings()
    cfg = tmp_path / "effective.yaml"
    cfg.write_text(render_yaml(effective, comments=True, show_secrets=True))
    monkeypatch.delenv("FAULT_AGENT_POLICY__DRY_RUN")
    monkeypatch.delenv("FAULT_AGENT_DETECT__PROBLEM_CONDITION_TYPES")
    assert load_settings(cfg).model_dump() == effective.model_dump()


@pytest.mark.parametrize(
    ("show", "expected"),
    [
        pytest.param([], REDACTED, id="redacted"),
        pytest.param(["--show-secrets"], "hunter2", id="shown-on-request"),
    ],
)
def test_secrets_are_redacted(monkeypatch: pytest.MonkeyPatch, show: list[str], expected: str) -> None:
    monkeypatch.setenv("FAULT_AGENT_KAFKA__SASL_PASSWORD", "hunter2")
    code, out, _ = _run(["settings", *show])
    assert code == 0
    assert yaml.safe_load(out)["kafka"]["sasl_password"] == expected
    assert ("hunter2" in out) is bool(show)


def test_unset_secret_stays_null() -> None:
    code, out, _ = _run(["settings"])
    assert code == 0
    assert yaml.safe_load(out)["kafka"]["sasl_password"] is None


@pytest.mark.parametrize(
    ("file_text", "message"),
    [
        pytest.param("server:\n  port: 70000\n", "server.port", id="out-of-range"),
        pytest.param("- a\n", "top level must be a mapping", id="not-a-mapping"),
        pytest.param("server: [\n", "not valid YAML", id="bad-yaml"),
    ],
)
def test_bad_settings_exit_2_with_message(tmp_path: Path, file_text: str, message: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(file_text)
    code, out, err = _run(["--config", str(cfg), "settings"])
    assert code == 2
    assert out == ""
    assert message in err


def test_configure_registers_func() -> None:
    parser = argparse.ArgumentParser()
    from agent.cli import settings as settings_cli

    settings_cli.configure(parser)
    args = parser.parse_args(["--defaults", "--comments"])
    assert args.func is settings_cli.run
