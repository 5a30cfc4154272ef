"""The guide's AscendJob as shipped (config/examples/acjob-default-test-pytorch.yaml) survives three restarts in all:
its `fault-retry-times: "3"` is also the Ascend Operator's backoff limit (no ``spec.runPolicy.backoffLimit``;
component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go ``setFaultRetryTimesToBackoffLimits``), and
the operator counts every restart. A business failure and three chip faults need four: ``backoffLimit: 4`` is the
smallest change (tests/e2e/test_ascendjob_guide_budgets.py runs it)."""

from __future__ import annotations

from pathlib import Path

import yaml

from agent.core.cluster import JobKind, JobRecord
from agent.core.policy import restart_budget
from agent.sources.jobs import ASCEND_LIMIT_FROM_LABEL, JobConverter

EXAMPLE = Path(__file__).resolve().parents[3] / "config" / "examples" / "acjob-default-test-pytorch.yaml"


def _example(backoff_limit: int | None = None) -> JobRecord:
    job = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "AscendJob")
    job["metadata"].update(uid="u1", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z")
    if backoff_limit is not None:
        job["spec"]["runPolicy"]["backoffLimit"] = backoff_limit
    rec = JobConverter(JobKind.ASCEND)(job)
    assert isinstance(rec, JobRecord)
    return rec


def test_the_shipped_guide_job_takes_three_restarts_and_backoff_limit_4_four() -> None:
    shipped = _example()
    assert (shipped.max_retry, shipped.max_retry_from) == (3, ASCEND_LIMIT_FROM_LABEL)
    assert restart_budget(shipped, 0) == (0, 3)  # a business failure + three chip faults = 4: the 4th fails it
    assert shipped.fault_retry_times == 3
    fixed = _example(4)
    assert restart_budget(fixed, 0) == (0, 4)
    assert fixed.fault_retry_times == 3  # business retries unchanged
