"""The agent on MindCluster's real ClusterD output: the recording the agent made while reading the real
ClusterD's ``cluster-info-*`` as its only fault source (dry run), on the testbed, replayed
(docs/mindcluster-conformance.md "ClusterD"; tests/fixtures/conformance/clusterd-real-22bb3d98-*). The job ran on
cd-node-2 and cd-node-3; the other nodes carried no pod."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from agent.cli import main

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures" / "conformance"
RECORDING = FIXTURES / "clusterd-real-22bb3d98-agent-recording"
SETTINGS = FIXTURES / "clusterd-real-22bb3d98-agent-settings.yaml"


@pytest.fixture(scope="module")
def lines() -> list[dict[str, str]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["replay", str(RECORDING), "--config", str(SETTINGS), "--json"]) == 0
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def _decisions(lines: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(d["action"], d["reason"].split(":")[0]) for d in lines if d["kind"] == "decision"]


def test_the_job_is_restarted_for_separate_faults_clusterd_reported_on_its_chips(lines: list[dict[str, str]]) -> None:
    """A SeparateNPU chip fault and a public SeparateNPU fault ClusterD merged into the device entry (fault_type
    PublicFault, code 220001001) on the job's chips each decide a restart; the pre-separate and not-handled ones
    on its node leave it running."""
    assert _decisions(lines) == [
        ("none", "chip fault PreSeparateNPU at Ascend910-0 on cd-node-2 codes 80E18402"),
        ("restart-job", "chip fault SeparateNPU at Ascend910-0 on cd-node-2 codes 80E3A201"),
        ("none", "node fault PreSeparateFault at cd-node-2 codes 00000011"),
        ("none", "node fault NotHandleFault at cd-node-2 codes 00000011"),
        ("restart-job", "chip fault SeparateNPU at Ascend910-1 on cd-node-2 codes 220001001"),
    ]


def test_nodes_clusterd_reports_unhealthy_are_quarantined_and_released(lines: list[dict[str, str]]) -> None:
    """ClusterD rewrote a pre-separate NodeD status as Healthy on the node in use and as UnHealthy on the free
    one; the switch fault on the free node taints it until the switch is healthy again."""
    writes = [(d["action"], d["reason"]) for d in lines if d["kind"] == "write" and "taint" in d["action"]]
    assert writes == [
        ("taint-node", "Node/cd-node-0 fault-agent.io/fault=SeparateNPU:NoSchedule"),
        ("taint-node", "Node/cd-node-2 fault-agent.io/fault=PreSeparateNPU:NoSchedule"),
        ("untaint-node", "Node/cd-node-2 fault-agent.io/fault"),
        ("untaint-node", "Node/cd-node-0 fault-agent.io/fault"),
        # the switch's sub-health fault keeps new pods off the node (policy.sub_health_taint, issue 36 item 5),
        # then its separate fault raises the taint's value
        ("taint-node", "Node/cd-node-0 fault-agent.io/fault=SubHealthFault:NoSchedule"),
        ("taint-node", "Node/cd-node-0 fault-agent.io/fault=SeparateNPU:NoSchedule"),
        ("untaint-node", "Node/cd-node-0 fault-agent.io/fault"),
    ]
