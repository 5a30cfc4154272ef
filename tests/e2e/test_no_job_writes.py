"""Issue 35: no write of the agent on a job object except the restart itself.

The job's controllers (Volcano's job controller here, the Ascend Operator) update the job read-modify-write; a PATCH
of ours in between made their updates fail with 409 (Volcano logged conflicts and created replacement pods, then
killed them; the Ascend Operator lost its Restarting condition). The agent now keeps each job's incident, retry
ledger and claim in a ConfigMap of its own namespace (agent.core.records). The whole agent as a subprocess, the
testbed's real apiserver and Volcano: after a chip fault and the job's restart and recovery, the job carries none
of the agent's annotations, its managedFields name none of them (no apply, patch or update of the agent set a
field under ``fault-agent.io/``), and the record holds the recovered incident.

Fails on the code before (the claim and the persisted steps were merge patches of the job's annotations).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, get_job, guide_vcjob, job_record, submit, wait_running

from agent.core.incidents import Phase, decode_incident, decode_ledger
from agent.core.records import KEY_ACTOR, KEY_INCIDENT, KEY_LEDGER, LEGACY_ANNOTATIONS
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


def _agent_fields(job: Any) -> list[str]:
    """The managers of the job's managedFields entries that own a field under ``fault-agent.io/`` other than the
    lineage annotations a resubmission's create sets (none here)."""
    owners = []
    for entry in job["metadata"].get("managedFields") or []:
        fields = json.dumps(entry.get("fieldsV1") or {})
        if any(f'"f:{key}"' in fields for key in LEGACY_ANNOTATIONS):
            owners.append(f"{entry.get('manager')} {entry.get('operation')}")
    return owners


@pytest.mark.parametrize("volcano_restart", ["auto", "command"])  # the default (pod deletion), a Command
async def test_a_restart_writes_nothing_on_the_job_and_keeps_the_incident_in_the_agents_record(
    scenario: Scenario, volcano_restart: str
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    await sc.start_agent(POLICY__VOLCANO_RESTART=volcano_restart)
    bad = pods[0]
    chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
    sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
    (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
    assert started["data"]["action"] == "restart-job"
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)

    job = await get_job(sc.api, sc.namespace, name)
    annotations = job["metadata"].get("annotations") or {}
    assert not {k for k in annotations if k in LEGACY_ANNOTATIONS}, annotations  # old code: incident, ledger, actor
    assert _agent_fields(job) == []  # old code: the agent's merge patches own f:fault-agent.io/... fields
    assert (job.get("status") or {}).get("retryCount") == 1  # Volcano restarted it once

    record = await job_record(sc.api, sc.namespace, job)  # leader.namespace is the scenario's namespace
    assert decode_incident(record[KEY_INCIDENT]).phase is Phase.RECOVERED
    assert decode_ledger(record[KEY_LEDGER]).restarts_used == 1
    assert record[KEY_ACTOR]  # the claim's mark: <identity>#<term>
