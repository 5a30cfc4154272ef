"""Render deploy/chart/ with the testbed's helm and deploy/ with `kubectl kustomize`, and compare the two.

Shared by tests/tools/test_deploy_chart.py and tests/integration/test_deploy_chart_install.py. helm comes from the
testbed's cache (testbed.build.helm_bins: built from the Go module proxy on first use); kubectl from PATH. A tool
that is missing or fails is a test failure with its stderr, never a skip.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import build

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "chart"

# What the chart adds on purpose and the kustomize base has not (the only differences the equality test
# forgives): Helm's standard labels on every object's metadata, the pod-template checksum of the settings (a
# change of settings rolls the pods on `helm upgrade`), and the outbox claim's keep policy (`helm uninstall`
# leaves it: it may hold events not yet sent).
HELM_ONLY_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
)
HELM_ONLY_ANNOTATIONS = frozenset({"checksum/config", "helm.sh/resource-policy"})

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name


def helm_binary() -> str:
    """The testbed's helm (built and cached on first use)."""
    return str(build.helm_bins() / "helm")


def run(argv: Sequence[str], *, stdin: str | None = None, cwd: Path = REPO) -> str:
    """Run a tool; its stdout. A non-zero exit fails with the command line and stderr (AssertionError)."""
    proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}"
    return proc.stdout


def helm(*args: str) -> str:
    """`helm <args>` (stdout); failures are AssertionErrors with helm's message."""
    return run([helm_binary(), *args])


@functools.cache
def _template(args: tuple[str, ...], release: str, namespace: str) -> str:
    return helm("template", release, str(CHART), "--namespace", namespace, *args)


def helm_template(*args: str, release: str = "fault-agent", namespace: str = "default") -> list[dict[str, Any]]:
    """The objects `helm template <release> deploy/chart -n <namespace> <args>` renders (``--set`` etc. in args);
    fresh objects on every call (the output of one set of arguments is rendered once per session)."""
    return [d for d in yaml.safe_load_all(_template(tuple(args), release, namespace)) if d]


@functools.cache
def _kustomize() -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH (needed for `kubectl kustomize`; see the README)"
    return run([kubectl, "kustomize", str(DEPLOY)])


def kustomize_build() -> list[dict[str, Any]]:
    """The objects `kubectl kustomize deploy/` renders (kubectl on PATH: README prerequisites); fresh objects on
    every call."""
    return [d for d in yaml.safe_load_all(_kustomize()) if d]


def key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def _parsed(name: str, text: str) -> Any:
    if name.endswith((".yaml", ".yml")):
        return yaml.safe_load(text)
    if name.endswith(".json"):
        return json.loads(text)
    return text


def normalise(objs: Sequence[Mapping[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Objects by key, with the chart's deliberate additions removed (HELM_ONLY_LABELS on metadata,
    HELM_ONLY_ANNOTATIONS on metadata and pod templates; an emptied map is dropped) and ConfigMap values that are
    YAML or JSON files parsed, so comments and key order do not count. Fails on two objects with one key."""
    out: dict[Key, dict[str, Any]] = {}
    for original in objs:
        obj = copy.deepcopy(dict(original))
        metas = [obj["metadata"]]
        template = obj.get("spec", {}).get("template") if isinstance(obj.get("spec"), dict) else None
        if isinstance(template, dict) and "metadata" in template:
            metas.append(template["metadata"])
        for meta in metas:
            for field, drop in (("labels", HELM_ONLY_LABELS), ("annotations", HELM_ONLY_ANNOTATIONS)):
                values = meta.get(field)
                if isinstance(values, dict):
                    for k in drop & values.keys():
                        del values[k]
                    if not values:
                        del meta[field]
        if obj["kind"] == "ConfigMap":
            obj["data"] = {k: _parsed(k, v) for k, v in (obj.get("data") or {}).items()}
        k = key(obj)
        assert k not in out, f"two objects {k}"
        out[k] = obj
    return out


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where `a` and `b` differ, one line per leaf (``path: a-value != b-value``; ``<absent>`` when missing)."""
    if isinstance(a, dict) and isinstance(b, dict):
        lines: list[str] = []
        for k in sorted(a.keys() | b.keys(), key=str):
            lines += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}/{k}")
        return lines
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [line for i, (x, y) in enumerate(zip(a, b, strict=True)) for line in differences(x, y, f"{path}[{i}]")]
    if a != b:
        return [f"{path or '/'}: {json.dumps(a, default=str)[:200]} != {json.dumps(b, default=str)[:200]}"]
    return []


def compare(kustomize: Sequence[Mapping[str, Any]], chart: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every difference between the two renderings after :func:`normalise`: objects only one has, then the
    fields that differ in the objects both have. Empty when they install the same objects."""
    left, right = normalise(kustomize), normalise(chart)
    lines = [f"only in deploy/ (kustomize): {'/'.join(k)}" for k in sorted(left.keys() - right.keys())]
    lines += [f"only in deploy/chart/: {'/'.join(k)}" for k in sorted(right.keys() - left.keys())]
    for k in sorted(left.keys() & right.keys()):
        lines += [f"{'/'.join(k)} {d}" for d in differences(left[k], right[k])]
    return lines
