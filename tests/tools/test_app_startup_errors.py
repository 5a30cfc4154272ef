"""`fault-agent run` stops at start with one clear log line (exit 1), not a traceback, when it cannot run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.sinks.metrics import agent_version

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def run_agent(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FAULT_AGENT_")}
    base.update(
        {
            "FAULT_AGENT_KAFKA__ENABLED": "false",
            "FAULT_AGENT_LEADER__ENABLED": "false",
            "FAULT_AGENT_LOG__FORMAT": "json",
            "FAULT_AGENT_KAFKA__OUTBOX_DIR": str(tmp_path / "outbox"),
            "FAULT_AGENT_SERVER__BIND_ADDRESS": "127.0.0.1",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "agent", "run"], env=base, capture_output=True, text=True, timeout=60, check=False
    )


def test_missing_kubeconfig(tmp_path: Path) -> None:
    res = run_agent({"FAULT_AGENT_KUBE__KUBECONFIG": str(tmp_path / "absent")}, tmp_path)
    assert res.returncode == 1
    out = res.stdout + res.stderr
    assert "agent cannot run" in out
    assert "no kubeconfig" in out
    assert "Traceback" not in out


def test_port_in_use(tmp_path: Path) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_agent({"FAULT_AGENT_KUBE__KUBECONFIG": str(cfg), "FAULT_AGENT_SERVER__PORT": str(port)}, tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    assert "agent cannot run" in out
    assert "address already in use" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("env", "named"),
    [
        pytest.param({"FAULT_AGENT_SERVER__PORT": "http"}, "server.port", id="bad-port"),
        pytest.param({"FAULT_AGENT_POLICY__RESTART_BURST": "0"}, "policy.restart_burst", id="zero-burst"),
    ],
)
def test_bad_setting_names_it(tmp_path: Path, env: dict[str, str], named: str) -> None:
    res = run_agent(env, tmp_path)
    assert res.returncode == 2
    assert named in res.stdout + res.stderr


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("clusters: [unclosed\n", id="not-yaml"),
        pytest.param("- just a list\n", id="not-a-mapping"),
        pytest.param("\x00\x01binary", id="binary"),
    ],
)
def test_unreadable_kubeconfig(tmp_path: Path, content: str) -> None:
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(content)
    res = run_agent({"FAULT_AGENT_KUBE__KUBECONFIG": str(cfg)}, tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    assert "cannot load Kubernetes credentials" in out
    assert "Traceback" not in out


def test_an_outbox_folder_another_agent_holds(tmp_path: Path) -> None:
    """Regression (found by a new-user trial): a second agent given the first's outbox folder started and sent
    the first's pending events; it now stops at start naming the holder and the setting to change."""
    from agent.sinks.outbox import Outbox

    cfg = tmp_path / "kubeconfig"
    cfg.write_text(KUBECONFIG)
    held = Outbox(tmp_path / "outbox")
    held.open()
    try:
        env = {"FAULT_AGENT_KUBE__KUBECONFIG": str(cfg), "FAULT_AGENT_SERVER__PORT": "0",
               "FAULT_AGENT_KAFKA__ENABLED": "true", "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"}  # fmt: skip
        res = run_agent(env, tmp_path)
    finally:
        held.close()
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    assert "agent cannot run" in out
    assert f"in use by another agent process (pid {os.getpid()} " in out
    assert "FAULT_AGENT_KAFKA__OUTBOX_DIR" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        pytest.param("SSL_CAFILE", "ca.crt", id="ca"),
        pytest.param("SSL_CERTFILE", "client.crt", id="client-certificate"),
        pytest.param("SSL_KEYFILE", "client.key", id="client-key"),
    ],
)
def test_a_missing_kafka_tls_file_is_one_line_naming_the_setting_and_the_file(
    tmp_path: Path, setting: str, name: str
) -> None:
    """Issue 41 (Kafka TLS from the chart): a Secret not mounted where the settings point is one line at start
    (exit 1) naming the setting and the file, not a traceback."""
    from testbed.tls import make_kafka_pki

    pki = make_kafka_pki(tmp_path / "pki")
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(KUBECONFIG)
    files = {"SSL_CAFILE": pki.ca_cert, "SSL_CERTFILE": pki.client_cert, "SSL_KEYFILE": pki.client_key}
    missing = tmp_path / "secret-not-mounted" / name
    env = {"FAULT_AGENT_KUBE__KUBECONFIG": str(cfg), "FAULT_AGENT_SERVER__PORT": "0",
           "FAULT_AGENT_KAFKA__ENABLED": "true", "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9",
           "FAULT_AGENT_KAFKA__SECURITY_PROTOCOL": "SSL",
           **{f"FAULT_AGENT_KAFKA__{k}": str(missing if k == setting else v) for k, v in files.items()}}  # fmt: skip
    res = run_agent(env, tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    assert "Traceback" not in out
    (line,) = [line for line in out.splitlines() if "agent cannot run" in line]
    assert f"kafka.{setting.lower()} [FAULT_AGENT_KAFKA__{setting}]" in line
    assert f"cannot read {missing}: No such file or directory" in line


def test_fault_agent_run_logs_the_line_once_before_anything_else_can_stop_it(tmp_path: Path) -> None:
    """The summary reaches the log of a real `fault-agent run` (JSON lines), once, before the HTTP server binds:
    started here with a port that is taken, so the process stops right after it (exit 1)."""
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {
            "FAULT_AGENT_KUBE__KUBECONFIG": str(cfg),
            "FAULT_AGENT_SERVER__PORT": str(taken.getsockname()[1]),
            "FAULT_AGENT_CLUSTER_NAME": "prod-a",
            "FAULT_AGENT_POLICY__DRY_RUN": "true",
            "FAULT_AGENT_KUBE__NAMESPACES": '["train"]',
        }
        res = run_agent(env, tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    starting = [line for line in lines if line.get("event") == "fault-agent starting"]
    assert len(starting) == 1, out[-2000:]
    (line,) = starting
    assert (line["cluster"], line["mode"], line["namespaces"], line["leader"]) == (
        "prod-a", "dry-run", ["train"], "disabled"
    )  # fmt: skip
    assert line["version"] == agent_version()
    assert "deviceinfo@kube-system" in line["sources"]
    assert line["kafka"] == "disabled"
