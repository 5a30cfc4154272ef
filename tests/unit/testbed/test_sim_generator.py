"""The synthetic cluster generator of the simulation benchmark (testbed/sim.py): fault counts follow the rate,
the objects are what the agent's parsers read (the device ConfigMaps from the Go encoder), the same seed gives the
same stream. Simulated time only: nothing here reads the wall clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from agent.core.detect import load_shipped_table, parse_device_info
from agent.core.detect.common import Rejections
from agent.core.faults import ObjectRef
from agent.replay import run_replay
from agent.settings import Settings
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers
from testbed.sim import (
    DEVICE_HEARTBEAT_S,
    FAULTS_PER_CHIP_HOUR,
    LISTED_LAST,
    SimCluster,
    SimConfig,
    expected_faults,
    go_encoder,
)


def stub_encoder(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stand-in for the counting tests (no bytes the agent parses): the request itself as the data."""
    return [
        {"metadata": {"name": f"mindx-dl-deviceinfo-{r['node']}", "namespace": "kube-system"},
         "data": {"req": orjson.dumps(r).decode()}}
        for r in requests
    ]  # fmt: skip


def run(config: SimConfig, encode: Any = stub_encoder) -> tuple[SimCluster, list[Any]]:
    sim = SimCluster(config, encode)
    return sim, list(sim.records())


def test_the_published_rate() -> None:
    # Llama 3: 419 interruptions / (54 days × 24 h × 16,384 GPUs)
    assert pytest.approx(1.973e-5, rel=1e-3) == FAULTS_PER_CHIP_HOUR
    assert expected_faults(SimConfig(nodes=100_000, hours=1)) == pytest.approx(15.8, abs=0.1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fault_count_follows_the_rate(seed: int) -> None:
    # 50 nodes × 8 chips over 10 h at a rate giving 2,000 faults; short repairs so few onsets hit a chip still down
    cfg = SimConfig(nodes=50, hours=10, fault_rate=2000 / (50 * 8 * 10), repair_s=30, node_status_s=0, seed=seed,
                    job_nodes=8)  # fmt: skip
    sim, _ = run(cfg)
    total = sum(sim.stats.faults.values())
    assert total == pytest.approx(expected_faults(cfg), rel=0.06)  # Poisson sd is 2.2 %; repairs hide a few
    for kind, share in cfg.mix:
        assert sim.stats.faults[kind] / total == pytest.approx(share, abs=0.04)


def test_heartbeat_cadence_without_faults() -> None:
    # every node's device plugin rewrites its unchanged ConfigMap every 5 minutes: 12 per node and hour
    cfg = SimConfig(nodes=20, hours=1, fault_rate=0, node_status_s=300)
    sim, records = run(cfg)
    cms = [r for r in records if r.resource == "configmaps" and r.type == "MODIFIED"]
    per_hour = 3600 // DEVICE_HEARTBEAT_S
    assert per_hour - 1 <= len(cms) / cfg.nodes <= per_hour
    statuses = [r for r in records if r.resource == "nodes" and r.type == "MODIFIED"]
    assert len(statuses) == 12 * cfg.nodes
    assert not sim.stats.faults
    assert sim.stats.restarts == 0


def test_time_order_and_initial_list() -> None:
    cfg = SimConfig(nodes=30, hours=2, fault_rate=5e-3, job_nodes=4, seed=3)
    sim, records = run(cfg)
    times = [r.t_ms for r in records]
    assert times == sorted(times)
    assert times[-1] < cfg.start_ms + 2 * 3_600_000
    listed = [i for i, r in enumerate(records) if r.type == "LISTED"]
    # the Nodes listed first, then the device ConfigMaps, then every other default watcher of the agent
    assert [records[i].source for i in listed] == ["nodes@*", "deviceinfo@kube-system", *LISTED_LAST]
    assert {w.resource.watcher_id for w in build_watchers(Settings().kube, None, ClusterState(), sink=None)} == {
        records[i].source for i in listed
    }
    initial = records[: listed[-1]]
    assert all(r.t_ms == cfg.start_ms and r.type in ("ADDED", "LISTED") for r in initial)
    assert {r.resource for r in initial if r.type == "ADDED"} == {"nodes", "configmaps", "vcjobs", "pods"}
    uids = [r.object["metadata"]["uid"] for r in initial if r.type == "ADDED"]
    assert len(set(uids)) == len(uids)
    assert sim.stats.restarts > 0


def test_same_seed_same_stream() -> None:
    cfg = SimConfig(nodes=40, hours=1, fault_rate=2e-3, job_nodes=8, seed=7)

    def dump(c: SimConfig) -> bytes:
        return b"\n".join(orjson.dumps([r.t_ms, r.type, r.resource, r.object]) for r in run(c)[1])

    assert dump(cfg) == dump(cfg)
    assert dump(cfg) != dump(SimConfig(nodes=40, hours=1, fault_rate=2e-3, job_nodes=8, seed=8))


def test_config_errors() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SimCluster(SimConfig(nodes=0), stub_encoder)


def test_device_configmaps_read_by_the_agents_parser() -> None:
    # Go-encoded ConfigMaps: the agent's parser verifies their CheckCode and finds the generated faults
    cfg = SimConfig(nodes=12, hours=1, fault_rate=5e-2, job_nodes=4, repair_s=600, seed=1)
    sim, records = run(cfg, go_encoder())
    table = load_shipped_table()
    faulty = 0
    for rec in records:
        if rec.resource != "configmaps":
            continue
        name = rec.object["metadata"]["name"]
        node = name.removeprefix("mindx-dl-deviceinfo-")
        rej = Rejections(ObjectRef("ConfigMap", "kube-system", name))
        now = datetime.fromtimestamp(rec.t_ms / 1000, UTC)
        snap = parse_device_info(rec.object["data"]["DeviceInfoCfg"], node, rej.source, table, now, rej)
        assert snap.check_code_ok
        assert not rej.items, rej.items
        assert snap.update_time is not None
        assert int(snap.update_time.timestamp()) == rec.t_ms // 1000
        faulty += bool(snap.faults)
    assert faulty > 0
    assert sum(sim.stats.faults.values()) > 0


def test_replayed_by_the_agent() -> None:
    # the whole stream through the replay: nothing skipped or ignored, a decision for each fault on a running job
    cfg = SimConfig(nodes=16, hours=2, fault_rate=3e-2, job_nodes=4, repair_s=1200, seed=2)
    sim = SimCluster(cfg, go_encoder())
    fault_jobs: list[str] = []

    def stream() -> Any:
        for rec in sim.records():
            if sim.fault_job is not None:
                fault_jobs.append(sim.fault_job)
            yield rec

    decided: list[str] = []
    result = run_replay(stream(), Settings(), on_output=lambda o: decided.append(o.job or "") if o.kind == "decision"
                        else None, tail_s=30)  # fmt: skip
    assert not result.problems
    assert result.ignored == 0
    assert fault_jobs, "the seed gives faults on running jobs"
    for job in set(fault_jobs):
        assert job in decided, (job, decided)
