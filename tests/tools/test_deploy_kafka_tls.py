"""Kafka over TLS from the chart (`kafkaTLS` values) and from the kustomize base (deploy/README.md's overlay): the
CA and client certificate Secrets mounted read-only, the agent's kafka settings pointed at the mounted files, the
values refused that cannot work, and the README's SASL, TLS and SASL-over-TLS values as documented (issue 41, 5).
Rendered with the testbed's helm and `kubectl kustomize`, as tests/tools/test_deploy_chart.py does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import CHART, DEPLOY, helm_binary, helm_template, kustomize_build
from test_deploy import _build_readme_overlay

from agent.settings import Settings, load_settings

MOUNT = "/etc/kafka-tls"
TLS = ("--set", "kafkaTLS.enabled=true")
CA = ("--set", "kafkaTLS.caSecret.name=kafka-ca")
CLIENT = ("--set", "kafkaTLS.clientSecret.name=kafka-client")


def _deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    return dep


def _settings(objs: list[dict[str, Any]], tmp_path: Path) -> Settings:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")]
    path = tmp_path / "agent.yaml"
    path.write_text(cm["data"]["agent.yaml"])
    return load_settings(path)


def _tls_volume(dep: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The pod's `kafka-tls` volume and the agent container's mount of it (None, None when absent)."""
    spec = dep["spec"]["template"]["spec"]
    volumes = [v for v in spec["volumes"] if v["name"] == "kafka-tls"]
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "kafka-tls"]
    assert len(volumes) == len(mounts) <= 1
    return (volumes[0], mounts[0]) if volumes else (None, None)


def _mounted_files(volume: dict[str, Any], mount: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Path in the container → (Secret, key) of every file the projected volume mounts."""
    files = {}
    for source in volume["projected"]["sources"]:
        for item in source["secret"]["items"]:
            files[f"{mount['mountPath']}/{item['path']}"] = (source["secret"]["name"], item["key"])
    return files


def test_kafka_tls_off_by_default_mounts_nothing(tmp_path: Path) -> None:
    objs = helm_template()
    assert _tls_volume(_deployment(objs)) == (None, None)
    kafka = _settings(objs, tmp_path).kafka
    assert (kafka.security_protocol, kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile) == (
        "PLAINTEXT", None, None, None
    )  # fmt: skip


def test_ca_and_client_secrets_are_mounted_read_only_and_the_settings_point_at_them(tmp_path: Path) -> None:
    objs = helm_template(*TLS, *CA, *CLIENT)
    volume, mount = _tls_volume(_deployment(objs))
    assert volume is not None
    assert mount == {"name": "kafka-tls", "mountPath": MOUNT, "readOnly": True}
    assert volume["projected"]["defaultMode"] == 0o440
    files = _mounted_files(volume, mount)
    assert files == {
        f"{MOUNT}/ca.crt": ("kafka-ca", "ca.crt"),
        f"{MOUNT}/client.crt": ("kafka-client", "tls.crt"),
        f"{MOUNT}/client.key": ("kafka-client", "tls.key"),
    }
    kafka = _settings(objs, tmp_path).kafka
    assert kafka.security_protocol == "SSL"
    assert kafka.ssl_check_hostname is True
    assert (kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile) == (
        f"{MOUNT}/ca.crt", f"{MOUNT}/client.crt", f"{MOUNT}/client.key"
    )  # fmt: skip
    assert {kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile} == set(files)
    # a change of the TLS values rolls the pods like any change of settings
    checksum = _deployment(objs)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum != _deployment(helm_template())["spec"]["template"]["metadata"]["annotations"]["checksum/config"]


def test_ca_only_with_other_keys_and_sasl_over_tls(tmp_path: Path) -> None:
    """A CA under another key, no client certificate, and SASL_SSL kept as settings say."""
    objs = helm_template(
        *TLS, "--set", "kafkaTLS.caSecret.name=corp-ca", "--set", "kafkaTLS.caSecret.key=bundle.pem",
        "--set", "settings.kafka.security_protocol=SASL_SSL", "--set", "settings.kafka.sasl_mechanism=SCRAM-SHA-256",
        "--set", "settings.kafka.sasl_username=fa", "--set", "settings.kafka.ssl_check_hostname=false",
    )  # fmt: skip
    volume, mount = _tls_volume(_deployment(objs))
    assert volume is not None
    assert mount is not None
    assert _mounted_files(volume, mount) == {f"{MOUNT}/ca.crt": ("corp-ca", "bundle.pem")}
    kafka = _settings(objs, tmp_path).kafka
    assert (kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username) == ("SASL_SSL", "SCRAM-SHA-256", "fa")
    assert (kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile) == (f"{MOUNT}/ca.crt", None, None)
    assert kafka.ssl_check_hostname is False


def test_tls_with_the_system_cas_mounts_nothing() -> None:
    objs = helm_template(*TLS)
    assert _tls_volume(_deployment(objs)) == (None, None)
    settings = yaml.safe_load(
        next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "fault-agent-config")["data"][
            "agent.yaml"
        ]
    )
    assert settings["kafka"]["security_protocol"] == "SSL"
    assert "ssl_cafile" not in settings["kafka"]


def _helm_error(*args: str) -> str:
    proc = subprocess.run(
        [helm_binary(), "template", "fault-agent", str(CHART), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0, proc.stdout[:500]
    return proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            [*TLS, *CA, "--set", "settings.kafka.security_protocol=SASL_PLAINTEXT"],
            "kafkaTLS.enabled is true but settings.kafka.security_protocol is SASL_PLAINTEXT",
            id="tls-on-a-plain-protocol",
        ),
        pytest.param(
            [*TLS, *CA, "--set", "settings.kafka.ssl_cafile=/elsewhere/ca.crt"],
            "settings.kafka.ssl_cafile is set and kafkaTLS mounts that file from a Secret",
            id="cafile-twice",
        ),
        pytest.param(
            [*CA],
            "kafkaTLS.caSecret.name or kafkaTLS.clientSecret.name is set but kafkaTLS.enabled is false",
            id="secret-without-tls",
        ),
        pytest.param([*TLS, "--set", "kafkaTLS.caSecret.nam=x"], "'nam' not allowed", id="misspelt-value"),
        pytest.param([*TLS, "--set", "kafkaTLS.caSecret.name=Kafka_CA"], "at '/kafkaTLS/caSecret/name'", id="bad-name"),
        pytest.param(["--set", "kafkaTLS.enabled=yes"], "at '/kafkaTLS/enabled'", id="switch-not-a-bool"),
        pytest.param(
            ["--set", "settings.kafka.ssl_check_hostname=maybe"],
            "at '/settings/kafka/ssl_check_hostname'",
            id="hostname-check-not-a-bool",
        ),
    ],
)
def test_values_that_cannot_work_are_refused(args: list[str], message: str) -> None:
    stderr = _helm_error(*args)
    assert message in stderr, stderr


def _readme_values(title: str) -> str:
    readme = (DEPLOY / "README.md").read_text()
    block = re.search(r"```yaml\n(# my-values\.yaml: " + re.escape(title) + r"\n.*?)```", readme, re.S)
    assert block is not None, f"deploy/README.md lacks the values {title!r}"
    return block.group(1)


@pytest.mark.parametrize(
    ("title", "protocol", "mounted", "sasl"),
    [
        pytest.param("Kafka with SASL (SCRAM over plain TCP)", "SASL_PLAINTEXT", set(), True, id="sasl"),
        pytest.param(
            "Kafka over TLS with a client certificate (mutual TLS)", "SSL",
            {f"{MOUNT}/ca.crt", f"{MOUNT}/client.crt", f"{MOUNT}/client.key"}, False, id="tls",
        ),
        pytest.param("Kafka with SASL over TLS", "SASL_SSL", {f"{MOUNT}/ca.crt"}, True, id="sasl-over-tls"),
    ],
)  # fmt: skip
def test_readme_values_for_sasl_tls_and_both(
    tmp_path: Path, title: str, protocol: str, mounted: set[str], sasl: bool
) -> None:
    """deploy/README.md's three values files render what the README says: the protocol, the mounted files the
    settings name, and the SASL password from its Secret."""
    values = tmp_path / "values.yaml"
    values.write_text(_readme_values(title))
    objs = helm_template("-f", str(values))
    dep = _deployment(objs)
    volume, mount = _tls_volume(dep)
    files = _mounted_files(volume, mount) if volume is not None and mount is not None else {}
    assert set(files) == mounted
    kafka = _settings(objs, tmp_path).kafka
    assert kafka.security_protocol == protocol
    assert {f for f in (kafka.ssl_cafile, kafka.ssl_certfile, kafka.ssl_keyfile) if f} == mounted
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    if sasl:
        assert (kafka.sasl_mechanism, kafka.sasl_username) == ("SCRAM-SHA-512", "fault-agent")
        assert env["FAULT_AGENT_KAFKA__SASL_PASSWORD"]["valueFrom"] == {
            "secretKeyRef": {"name": "kafka-sasl", "key": "password"}
        }
    else:
        assert "FAULT_AGENT_KAFKA__SASL_PASSWORD" not in env


def test_readme_overlay_for_kafka_over_tls_matches_the_chart(tmp_path: Path) -> None:
    """The kustomize overlay mounts the same Secrets at the same place as the chart with kafkaTLS (CA and client
    certificate), and sets through the environment the settings the chart writes into agent.yaml."""
    built = _build_readme_overlay(tmp_path, "for Kafka over TLS")
    dep = _deployment(built)
    volume, mount = _tls_volume(dep)
    chart_objs = helm_template(*TLS, *CA, *CLIENT)
    chart_volume, chart_mount = _tls_volume(_deployment(chart_objs))
    assert volume == chart_volume
    assert mount == chart_mount
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    kafka = _settings(chart_objs, tmp_path).kafka
    for name in ("security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        assert env[f"FAULT_AGENT_KAFKA__{name.upper()}"] == getattr(kafka, name), name
    # everything else is the base's: the overlay adds one volume and its mount
    base = _deployment(kustomize_build())
    base_spec = base["spec"]["template"]["spec"]
    spec = dep["spec"]["template"]["spec"]
    assert [v for v in spec["volumes"] if v["name"] != "kafka-tls"] == base_spec["volumes"]
    container = spec["containers"][0]
    assert [m for m in container["volumeMounts"] if m["name"] != "kafka-tls"] == base_spec["containers"][0][
        "volumeMounts"
    ]
