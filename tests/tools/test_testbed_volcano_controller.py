"""The testbed's Volcano controller profiles: "mindcluster" is what MindCluster's own manifests run.

The manifest is read from the MindCluster git mirror (MINDCLUSTER_GIT_DIR, as tests/unit/core/test_fault_tables.py),
not from a copy of ours, so a profile that drifts from the source fails here.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.cluster import VOLCANO_CONTROLLER_PROFILES, Testbed, TestbedError
from testbed.tools import gen_fault_tables as gen

GIT_DIR = os.environ.get("MINDCLUSTER_GIT_DIR", gen.DEFAULT_GIT_DIR)
MANIFEST = "component/ascend-for-volcano/build/volcano-v1.15.0.yaml"
"""The newest of MindCluster's Volcano manifests (the testbed runs Volcano v1.14.1, between its v1.12.0 and v1.15.0
ones; v1.12.0's gives the same tuning but names --worker-threads twice, 6 then 3, of which Go's flag parser keeps
the last)."""
# flags of the shipped controller that are about logging, health, metrics and which controllers run: the testbed
# sets its own (its controller list is restricted for the CRDs it installs)
NOT_TUNING = ("--log", "--enable-", "--controllers", "--logtostderr")


def _controller_flags(path: str) -> set[str]:
    """The command-line flags MindCluster's manifest `path` gives vc-controller-manager (its container runs
    ``/bin/sh -c "umask 027; /vc-controller-manager --flag=value ..."``)."""
    assert Path(GIT_DIR).is_dir(), f"the MindCluster git mirror {GIT_DIR} is needed (set MINDCLUSTER_GIT_DIR)"
    text = subprocess.run(
        ["git", f"--git-dir={GIT_DIR}", "show", f"{gen.DEFAULT_COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    for doc in yaml.safe_load_all(text):
        if not isinstance(doc, dict) or doc.get("kind") != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if "vc-controller-manager" not in container.get("image", ""):
                continue
            words = shlex.split(" ".join(container.get("args", [])).replace(";", " "))
            return {w for w in words if w.startswith("--")}
    raise AssertionError(f"no vc-controller-manager Deployment in {path}")


def test_the_mindcluster_profile_is_the_shipped_controllers_tuning() -> None:
    shipped = {f for f in _controller_flags(MANIFEST) if not f.startswith(NOT_TUNING)}
    assert shipped == set(VOLCANO_CONTROLLER_PROFILES["mindcluster"])


def test_the_default_profile_adds_nothing_to_volcanos_defaults() -> None:
    assert VOLCANO_CONTROLLER_PROFILES["volcano"] == ()


def test_an_unknown_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TestbedError, match=r"unknown Volcano controller profile 'fast'.*mindcluster, volcano"):
        Testbed(tmp_path, volcano_controller="fast")


@pytest.mark.parametrize("profile", sorted(VOLCANO_CONTROLLER_PROFILES))
def test_an_attached_testbed_knows_the_profile_it_was_started_with(tmp_path: Path, profile: str) -> None:
    argv = ["vc-controller-manager", "--kubeconfig=k", "--leader-elect=false", *VOLCANO_CONTROLLER_PROFILES[profile]]
    ports = {f: 10000 + i for i, f in enumerate(("etcd", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok", "kafka",
                                                  "kafka_controller", "vc_controller", "vc_controller_healthz",
                                                  "vc_scheduler", "vc_scheduler_healthz"))}  # fmt: skip
    state = {
        "ports": ports,
        "token": "t",
        "components": {"vc-controller-manager": {"argv": argv, "log": str(tmp_path / "vc.log"), "pid": None}},
    }
    (tmp_path / "state.json").write_text(json.dumps(state), encoding="utf-8")
    assert Testbed.attach(tmp_path).volcano_controller == profile
