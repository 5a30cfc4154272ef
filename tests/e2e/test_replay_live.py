"""Record, then replay: the agent runs live on the testbed with ``fault-agent run --record DIR``, a scenario of
tests/e2e happens (the guide's job, a fault injected as MindCluster writes it), the agent stops; ``fault-agent
replay`` of its recording must make the decisions the live agent made, as its Kafka events show them
(docs/replay.md).

Compared per job of the test: the sequence of (event type, action) of ``fault.detected``, ``recovery.started``,
``recovery.succeeded`` and ``recovery.failed`` events, live (Kafka) against replayed (the replay's event outputs),
and the live restart Command count against the replay's ``restart-command`` writes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import Scenario, for_job
from helpers import VC, get_job, guide_vcjob, record_commands, restart_commands, submit, wait_running

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

COMPARED = ("fault.detected", "recovery.started", "recovery.succeeded", "recovery.failed")


def _settings_file(sc: Scenario, path: Path, **extra: Any) -> Path:
    """The live agent's isolation settings (conftest.Scenario.start_agent) as an agent.yaml for the replay."""
    data: dict[str, Any] = {
        "cluster_name": f"e2e-{sc.tag}",
        "kube": {"namespaces": [sc.namespace]},
        "policy": {
            "breaker_configmap": f"fault-agent-breaker-{sc.tag}",
            "breaker_min_faulty_nodes": 1000,
            "volcano_restart": "command",  # as conftest pins the live agent's (POLICY__VOLCANO_RESTART)
        },
        "leader": {"namespace": sc.namespace, "name": f"fault-agent-{sc.tag}"},
    }
    for key, value in extra.items():
        data.setdefault(key.split(".")[0], {})[key.split(".")[1]] = value
    path.write_text(json.dumps(data))
    return path


def _live(sc: Scenario, uid: str) -> list[tuple[str, str]]:
    out = []
    for e in sc.events("", for_job(uid)):
        short = e["type"].removeprefix("io.faultagent.").removesuffix(".v1")
        if short in COMPARED:
            out.append((short, (e.get("data") or {}).get("action") or ""))
    return out


def _replayed(rows: list[dict[str, Any]], job: str) -> list[tuple[str, str]]:
    out = []
    for r in rows:
        if r["kind"] != "event" or r["job"] != job:
            continue
        short = r["event_type"].removeprefix("io.faultagent.").removesuffix(".v1")
        if short in COMPARED:
            out.append((short, r["action"]))
    return out


def _replay(recording: Path, config: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "agent", "replay", str(recording), "--config", str(config), "--json", "--tail", "5"],
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, f"replay exited {done.returncode}: {done.stderr.decode()[-3000:]}"
    return [orjson.loads(x) for x in done.stdout.splitlines()]


async def _record_live(
    sc: Scenario, inject: Any, *, wait_for: str, **agent_settings: str
) -> tuple[Path, str, str, int]:
    """The guide's job Running on two of four nodes, the agent recording, `inject(bad_node, chip)`, until the
    job's `wait_for` event; then the agent stops (flushing its recording). Returns (recording folder, job name,
    job UID, live Commands)."""
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    folder = sc.workdir / f"rec-{sc.tag}"
    agent = await sc.start_agent(args=("--record", str(folder)), RECORD__FLUSH_INTERVAL_S="0.2", **agent_settings)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[3].rsplit("-", 1)[1])
        inject(bad.spec.node_name, chip)
        await sc.wait_events(wait_for, for_job(uid), timeout_s=90)
        await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
        await asyncio.sleep(1.5)  # the last changes reach the recording's buffer
        n_commands = len(restart_commands(commands, name))
    finally:
        await commands.stop()
        await asyncio.to_thread(agent.stop)
    assert any(folder.glob("rec-*.jsonl.gz")), "the agent wrote no recording"
    assert (await get_job(sc.api, sc.namespace, name))["metadata"]["uid"] == uid
    return folder, name, uid, n_commands


async def test_replay_of_a_chip_fault_recording_makes_the_live_decisions(scenario: Scenario) -> None:
    sc = scenario

    def inject(node: str, chip: int) -> None:
        sc.injector.chip_fault(node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

    folder, name, uid, n_commands = await _record_live(sc, inject, wait_for="recovery.succeeded")
    live = _live(sc, uid)
    assert [t for t, _ in live].count("recovery.started") == 1, live
    rows = _replay(folder, _settings_file(sc, sc.workdir / "replay.yaml"))
    job = f"{sc.namespace}/{name}"
    assert sorted(_replayed(rows, job)) == sorted(live)  # one durable batch: either order in Kafka
    decisions = [r["action"] for r in rows if r["kind"] == "decision" and r["job"] == job]
    assert decisions == ["restart-job"]
    writes = [r for r in rows if r["kind"] == "write" and r["job"] == job and r["action"] == "restart-command"]
    assert len(writes) == n_commands == 1


async def test_replay_of_a_noded_fault_recording_makes_the_live_decisions(scenario: Scenario) -> None:
    sc = scenario
    taint_key = f"e2e.fault-agent.io/{sc.tag}"

    def inject(node: str, chip: int) -> None:
        sc.injector.node_fault(node, "SeparateFault", ("00000011",))

    folder, name, uid, n_commands = await _record_live(
        sc, inject, wait_for="recovery.succeeded", POLICY__TAINT_KEY=taint_key
    )
    live = _live(sc, uid)
    rows = _replay(folder, _settings_file(sc, sc.workdir / "replay.yaml", **{"policy.taint_key": taint_key}))
    job = f"{sc.namespace}/{name}"
    # one durable batch: fault.detected and recovery.started may reach Kafka in either order (seen in CI)
    assert sorted(_replayed(rows, job)) == sorted(live)
    assert [r["action"] for r in rows if r["kind"] == "decision" and r["job"] == job] == ["restart-job"]
    assert n_commands == 1
    taints = [r for r in rows if r["kind"] == "write" and r["action"] == "taint-node" and taint_key in r["reason"]]
    assert taints, "the replayed agent did not quarantine the node the live one tainted"
