"""bench/conformance_ascendjob.py's comparison, on the recorded runs (tests/fixtures/conformance/): MindCluster's
real Ascend Operator (22bb3d98) and the testbed's stand-in match at every step but one, whose pod versions depend
on which of two deletions the operator handles first (docs/mindcluster-conformance.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "conformance"


def _driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_conformance_under_test", ROOT / "bench" / "conformance_ascendjob.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return out


def test_the_recorded_runs_match_except_the_racy_step() -> None:
    table = _driver().compare(_load("ascend-operator-real-22bb3d98.json"), _load("ascend-operator-standin.json"))
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 28
    mismatched = [row.split("|")[2].strip() for row in rows if row.rstrip().endswith("| **no** |")]
    assert mismatched == ["deletion 2: all pods deleted"]


def test_the_real_operator_never_labels_the_job_and_reappends_created_after_running() -> None:
    real = _load("ascend-operator-real-22bb3d98.json")["scenarios"]
    assert {s["job_version_label"] for steps in real.values() for s in steps} == {None}
    after_restart = real["3"][1]
    assert [(c["type"], c["reason"]) for c in after_restart["conditions"]] == [
        ("Running", "JobRunning"),
        ("Created", "PodGroupPending"),
    ]
    assert after_restart["conditions"][1]["lastTransitionTime"] == real["3"][0]["conditions"][0]["lastTransitionTime"]
    assert {p["name"]: p["version"] for p in after_restart["pods"]} == {"master-0": "1", "worker-0": "0"}
    assert real["1a"][1]["phase"] == "Failed"  # a failed pod with no remain-retry-times entry fails the job
    assert real["1b"][1]["phase"] == "Restarting"
    assert real["6"][0]["podgroup"]["labels_added"] == {"process-recover-enable": "on"}


def test_the_recorded_rank_tables_match_step_for_step() -> None:
    """bench/conformance_ranktable.py's runs: the real operator and the stand-in write the same four values of
    ``hccl.json`` around a Worker pod's deletion (initializing, completed, initializing with the last servers,
    completed), byte for byte, and move ``version`` alike (0, then the previous save's Unix time)."""
    real, stand_in = _load("ranktable-real-22bb3d98.json"), _load("ranktable-standin.json")

    def shapes(record: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in s.items() if k != "t"} for s in record["steps"][:-1]]

    assert [s["status"] for s in shapes(real)] == ["initializing", "completed", "initializing", "completed"]
    assert shapes(stand_in) == shapes(real)
    texts = [[v[1] for v in r["steps"][-1]["raw"]] for r in (real, stand_in)]
    assert texts[0] == texts[1]
    assert [s["version"] for s in shapes(real)] == ["unset", "0", "unix time", "unix time"]
