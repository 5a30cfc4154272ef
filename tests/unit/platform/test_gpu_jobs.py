"""`fault-agent lint` and `submit` accept a GPU job (issue 42): a Volcano Job asking for ``nvidia.com/gpu`` has no
HCCL rank table, so no ``ring-controller.atlas`` label and no rings-config are asked of it or created for it; an
NPU job is held to them as before. Example: config/examples/vcjob-gpu.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.platform.lint import ERROR, is_gpu_job, job_uses_gpus, lint_documents
from agent.platform.submit import plan_documents

ROOT = Path(__file__).resolve().parents[3]


def example(name: str) -> list[Any]:
    return list(yaml.safe_load_all((ROOT / "config" / "examples" / name).read_text()))


def test_the_gpu_example_lints_clean_and_submits_without_a_rings_config() -> None:
    docs = example("vcjob-gpu.yaml")
    assert [p for p in lint_documents(docs, "vcjob-gpu.yaml") if p.severity == ERROR] == []
    plan = plan_documents(docs, None)
    assert plan.rings_config is None
    assert plan.ref == "Job gpujob/gpu-train"
    assert job_uses_gpus(docs[0])


def test_a_gpu_job_still_gets_the_general_rules() -> None:
    (job,) = copy.deepcopy(example("vcjob-gpu.yaml"))
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["nvidia.com/gpu"] = "4"
    job["spec"]["tasks"][0]["template"]["spec"]["restartPolicy"] = "OnFailure"
    rules = {p.rule for p in lint_documents([job], "x.yaml") if p.severity == ERROR}
    assert rules == {"gpu-requests-not-limits", "retry-times-needs-never"}


def test_an_npu_job_without_its_ring_controller_label_is_still_refused() -> None:
    docs = example("vcjob-mindx-dls-test.yaml")
    job = next(d for d in docs if d["kind"] == "Job")
    del job["metadata"]["labels"]["ring-controller.atlas"]
    assert "ring-controller-missing" in {p.rule for p in lint_documents(docs, "x.yaml") if p.severity == ERROR}
    assert not job_uses_gpus(job)
    assert plan_documents(docs, None).rings_config is not None


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"nvidia.com/gpu": "8"}, True),
        ({"nvidia.com/mig-1g.10gb": "1"}, True),
        ({"amd.com/gpu": "8"}, True),
        ({"huawei.com/Ascend910": "8"}, False),
        ({"huawei.com/Ascend910": "8", "nvidia.com/gpu": "1"}, False),  # an NPU job keeps the NPU rules
        ({"cpu": "4"}, False),
    ],
)
def test_is_gpu_job(resources: dict[str, str], expected: bool) -> None:
    (job,) = copy.deepcopy(example("vcjob-gpu.yaml"))
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"] = {"limits": resources}
    assert job_uses_gpus(job) is expected
    assert is_gpu_job([]) is False
