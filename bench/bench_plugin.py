"""Benchmark: the agent beside MindCluster's own Volcano plugin, on the same testbed, jobs and chip faults.

A measurement only (issue 39): MindCluster's scheduler is Volcano's vc-scheduler with ``ascend-for-volcano`` in it,
built from its source outside this repository by ``bench/build_mindcluster_scheduler.py``.

Set-up: ``--jobs`` copies of the integration guide's Volcano Job (2 pods × 8 chips, ``fault-scheduling=force``,
``ring-controller.atlas``, Volcano's ``PodEvicted → RestartJob`` policy) on kwok nodes labelled as the guide's Atlas
A2 nodes (``accelerator-type: module-910b-8``, ``host-arch``), with healthy device-plugin ConfigMaps
(``kube-system/mindx-dl-deviceinfo-<node>``, written through Go's encoding as the device plugin does); the testbed's
Volcano controller-manager (stock v1.14.1) restarts the jobs in both arms. Two arms, alternated round by round:

- ``mindcluster``: the testbed's stock vc-scheduler is stopped and MindCluster's scheduler runs in its place (same
  apiserver, scheduler name ``volcano``, ``--schedule-period`` 200 ms, the plugin compiled in), with
  Volcano's default actions and tiers plus the plugin (:func:`scheduler_conf`; ``useClusterInfoManager: false``:
  the plugin reads the device-plugin ConfigMaps itself, as without ClusterD). No agent.
- ``agent``: the testbed's stock vc-scheduler (200 ms period, Volcano's default configuration) and the agent
  (``fault-agent run``, its restart rate limit and breaker raised out of the way, ``policy.volcano_restart``
  from ``--volcano-restart``, default the agent's own).

Each round injects one SeparateNPU chip fault (the testbed injector's ConfigMap write, as ``bench_e2e`` does) per
job, ``--interval`` s apart, on a node running one of its pods; waits until every job is ready again with new pods
(Running, 2 Running pods with chips, none of the old ones), then heals the chips. Per fault, from the moment the
injector sent the ConfigMap PUT (this process's clock):

- first old pod terminating: the first event of one of the job's pods with a deletionTimestamp, or its deletion,
  on a pod watch held by this process (whoever deleted it: the plugin, the agent, or Volcano's controller);
- job Running again: the job watch's first Running after a phase other than Running
  (:func:`testbed.controller_costs.running_again`).

The load of each arm: the 1-minute load average at each round's start and end (``/proc/loadavg``; the machine is
shared) and the CPU seconds (user + system, every thread, ``/proc/<pid>/stat``) the arm's own actors used during
the round: MindCluster's scheduler in one arm; the agent and the stock scheduler in the other.

    python bench/bench_plugin.py [--dir TESTBED] [--jobs 10] [--runs 3] [--volcano-restart delete-pods] [--write]

Raises SystemExit when the scheduler binary is not built (run build_mindcluster_scheduler.py first), a scheduler
or the agent does not start, or a job does not recover within the timeouts (naming the logs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_mindcluster_scheduler import COMMIT, MIRROR, PLUGIN_NAME
from build_mindcluster_scheduler import build as build_scheduler
from e2e_common import (
    STORM_SETTINGS,
    create_guide_jobs,
    create_namespace,
    open_testbed,
    pods_of,
    put_row,
    say,
    wait_jobs_ready,
)

from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed
from testbed.controller_costs import running_again, slim_job, slim_pod
from testbed.inject import CHIPS_PER_NODE, ChipFault, Injector, chip_name
from testbed.npu_plugin import device_ip
from testbed.observe import Seen, TimedRest, WatchRecorder, pct

NAMESPACE = "bench-plugin"
ARMS = ("mindcluster", "agent")
NODE_CHIP_LABEL, NODE_CHIP_VALUE = "accelerator", "huawei-Ascend910"
BASE_DEVICE_INFOS = "baseDeviceInfos"
KWOK_IP = "127.0.0.1"  # kwok gives every node this address (testbed/cluster.py --node-ip)
ROW = "beside MindCluster's plugin, 200 ms period"


def scheduler_conf(plugin: str) -> str:
    """Volcano's default scheduler configuration (v1.14.1 ``pkg/scheduler/util.go`` defaultSchedulerConf: actions
    enqueue, allocate, backfill; tiers priority, gang, conformance / drf, predicates, proportion, nodeorder,
    binpack) with the NPU plugin `plugin` added to the first tier, and the plugin's ``init-params`` configuration
    (keys from component/ascend-for-volcano common/util/type.go; ``useClusterInfoManager: "false"`` so it reads
    ``kube-system/mindx-dl-deviceinfo-<node>`` itself, ``forceEnqueue``: its enqueue check of NPU requests)."""
    return f"""actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
  - name: {plugin}
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
configurations:
- name: init-params
  arguments: {{"useClusterInfoManager": "false", "forceEnqueue": "true", "presetVirtualDevice": "true"}}
"""


@dataclass
class Fault:
    arm: str
    round: int
    job: str
    node: str
    at: float  # the ConfigMap PUT sent, this process's clock (s)
    terminating_at: float | None = None
    running_at: float | None = None


@dataclass
class ArmLoad:
    loadavg: list[float] = field(default_factory=list)  # 1-min load average at each round's start and end
    cpu_s: float = 0.0  # the arm's actors' CPU seconds during its rounds
    faults: int = 0


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system, every thread) of process `pid`: ``/proc/<pid>/stat`` fields 14 and 15."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class MindClusterScheduler:
    """MindCluster's vc-scheduler in place of the testbed's stock one (same ports, kubeconfig, scheduler name)."""

    def __init__(self, tb: Testbed, build: Path, workdir: Path) -> None:
        self.tb = tb
        self.workdir = workdir
        conf = workdir / "mindcluster-scheduler.conf"
        conf.write_text(scheduler_conf(PLUGIN_NAME), encoding="utf-8")
        p = tb.ports
        self.argv = [
            str(build / "bin" / "vc-scheduler"),
            f"--kubeconfig={tb.kubeconfig}",
            "--leader-elect=false",
            "--scheduler-name=volcano",
            "--schedule-period=200ms",
            f"--scheduler-conf={conf}",
            f"--listen-address=127.0.0.1:{p.vc_scheduler}",
            f"--healthz-address=127.0.0.1:{p.vc_scheduler_healthz}",
            "--enable-healthz=true",
            "-v=2",
        ]
        self.log = tb.logs_dir / "vc-scheduler-mindcluster.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Stop the stock scheduler, start this one, wait for its healthz and the plugin's session log."""
        self.tb.kill("vc-scheduler")
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        url = f"http://127.0.0.1:{self.tb.ports.vc_scheduler_healthz}/healthz"
        while not self._ready(url, offset):
            if self.proc.poll() is not None:
                raise SystemExit(f"MindCluster's scheduler exited ({self.proc.returncode}); log {self.log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"MindCluster's scheduler not healthy with {PLUGIN_NAME} within 60 s; log {self.log}")
            time.sleep(0.2)

    def _ready(self, url: str, offset: int) -> bool:
        """Healthz answers 200 and the log says the configuration loaded with the plugin in it (Volcano logs the
        plugins once loaded, pkg/scheduler/scheduler.go; an unknown name fails its sessions, not its healthz)."""
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status != 200:
                    return False
        except OSError:
            return False
        text = self.log.read_bytes()[offset:].decode(errors="replace")
        loaded = [ln for ln in text.splitlines() if "Finished loading scheduler config" in ln]
        if loaded and PLUGIN_NAME not in loaded[-1]:
            raise SystemExit(f"MindCluster's scheduler loaded without {PLUGIN_NAME}; log {self.log}")
        return bool(loaded)

    def stop(self) -> None:
        """Stop this scheduler and bring the testbed's stock one back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        self.tb.start("vc-scheduler")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def _terminating(s: Seen, job: str) -> bool:
    meta = s.obj.get("metadata", {})
    return meta.get("job") == job and (s.type == "DELETED" or (s.type == "MODIFIED" and bool(meta["deleting"])))


async def _round(
    arm: str,
    r: int,
    inj: Injector,
    timed: TimedRest,
    names: list[str],
    pods: list[dict[str, Any]],
    interval: float,
) -> list[Fault]:
    batch: list[Fault] = []
    for i, name in enumerate(names):
        job_pods = pods_of(pods, name)
        node = str(job_pods[(r + i) % len(job_pods)]["spec"]["nodeName"])
        await asyncio.to_thread(inj.chip_fault, node, [ChipFault(0)])
        batch.append(Fault(arm, r, name, node, timed.last_write(f"mindx-dl-deviceinfo-{node}", sent=True)))
        await asyncio.sleep(interval)
    return batch


async def measure(tb: Testbed, args: argparse.Namespace, workdir: Path) -> tuple[list[Fault], dict[str, ArmLoad]]:
    rest = tb.rest()
    inj = Injector(TimedRest.of(tb))
    timed: TimedRest = inj.rest  # type: ignore[assignment]
    names = [f"plugin-{i}" for i in range(args.jobs)]
    nodes = [f"plugin-node-{i}" for i in range(args.jobs * 3 + 4)]
    say(f"{len(nodes)} kwok nodes, {len(names)} guide jobs in {NAMESPACE}")
    create_namespace(rest, NAMESPACE)
    await asyncio.to_thread(inj.add_nodes, nodes)
    for n in nodes:
        inj.chip_healthy(n)
        # the label MindCluster's plugin reads the chip kind from (plugin/vnode.go GetChipKindFromNpuNode; its
        # installation guide labels NPU nodes with it); the stock scheduler and the agent do not read it
        # and the device plugin's node annotation the plugin lists a node's chips from (common/util/util.go
        # GetNodeDevListFromAnno; NpuBaseInfo in common/util/type.go): chip name -> {"IP", "SuperDeviceID"}
        base = {chip_name(c): {"IP": device_ip(KWOK_IP, c), "SuperDeviceID": 0} for c in range(CHIPS_PER_NODE)}
        meta = {"labels": {NODE_CHIP_LABEL: NODE_CHIP_VALUE}, "annotations": {BASE_DEVICE_INFOS: json.dumps(base)}}
        rest.merge_patch(f"/api/v1/nodes/{n}", {"metadata": meta})
    mc = MindClusterScheduler(tb, args.build, workdir)
    pod_watch = WatchRecorder(tb, f"/api/v1/namespaces/{NAMESPACE}/pods", slim=slim_pod)
    job_watch = WatchRecorder(tb, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs", slim=slim_job)
    await pod_watch.start()
    await job_watch.start()
    out: list[Fault] = []
    loads = {arm: ArmLoad() for arm in ARMS}
    settings = {**STORM_SETTINGS}
    if args.volcano_restart:
        settings["POLICY__VOLCANO_RESTART"] = args.volcano_restart
    agent: AgentProcess | None = None
    replaced: dict[str, frozenset[str]] = {}
    try:
        await asyncio.to_thread(create_guide_jobs, rest, NAMESPACE, names)
        for r in range(args.runs * len(ARMS)):
            arm = ARMS[(r + args.first) % len(ARMS)]
            if arm == "mindcluster":
                await asyncio.to_thread(mc.start)
            else:
                agent = AgentProcess(tb, workdir, settings=settings, name=f"bench-plugin-agent-{r}")
                await asyncio.to_thread(agent.start, ready_timeout_s=120)
                deadline = time.monotonic() + 30
                while agent.metric("fault_agent_leader") < 1:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"agent not leader within 30 s; log {agent.log}")
                    await asyncio.sleep(0.2)
            _, pods = await asyncio.to_thread(
                wait_jobs_ready, rest, NAMESPACE, names, timeout_s=args.timeout, replaced=replaced
            )  # fmt: skip
            await asyncio.sleep(args.settle)
            actors = [mc.pid] if arm == "mindcluster" else [agent.proc.pid if agent and agent.proc else None,
                                                            tb.components["vc-scheduler"].current_pid()]  # fmt: skip
            cpu_from = sum(_cpu_s(p) for p in actors)
            loads[arm].loadavg.append(_loadavg())
            say(f"round {r + 1}/{args.runs * len(ARMS)} ({arm}): {len(names)} faults")
            batch = await _round(arm, r, inj, timed, names, pods, args.interval)
            replaced = {f.job: frozenset(str(p["metadata"]["uid"]) for p in pods_of(pods, f.job)) for f in batch}
            try:
                await asyncio.to_thread(
                    wait_jobs_ready, rest, NAMESPACE, names, timeout_s=args.timeout, replaced=replaced
                )  # fmt: skip
            except TimeoutError as e:
                log = mc.log if arm == "mindcluster" else (agent.log if agent else "")
                raise SystemExit(f"{arm} round {r + 1}: {e}; log {log}") from e
            await asyncio.sleep(0.5)
            loads[arm].cpu_s += sum(_cpu_s(p) for p in actors) - cpu_from
            loads[arm].loadavg.append(_loadavg())
            loads[arm].faults += len(batch)
            for f in batch:
                f.terminating_at = next(
                    (s.at for s in pod_watch.events if s.at >= f.at and _terminating(s, f.job)), None
                )
                f.running_at = running_again(job_watch.events, f.job, f.at)
            out.extend(batch)
            for f in batch:
                await asyncio.to_thread(inj.chip_healthy, f.node)
            if arm == "mindcluster":
                await asyncio.to_thread(mc.stop)
            elif agent is not None:
                agent.stop()
                agent = None
    finally:
        if agent is not None:
            agent.stop()
        if mc.proc is not None:
            mc.stop()
        await pod_watch.stop()
        await job_watch.stop()
    return out, loads


def _since(f: Fault, at: float | None) -> float | None:
    return None if at is None else round((at - f.at) * 1000, 1)


def _ms(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {pct(values, 0.5):,.0f} / p99 {pct(values, 0.99):,.0f} ms (n={len(values)})"


def report(faults: list[Fault], loads: dict[str, ArmLoad]) -> dict[str, dict[str, list[float]]]:
    stats: dict[str, dict[str, list[float]]] = {}
    for arm in ARMS:
        mine = [f for f in faults if f.arm == arm]
        term = [(f.terminating_at - f.at) * 1000 for f in mine if f.terminating_at is not None]
        run = [(f.running_at - f.at) * 1000 for f in mine if f.running_at is not None]
        stats[arm] = {"terminating": term, "running": run}
        ld = loads[arm]
        say(
            f"{arm}: first old pod terminating {_ms(term)}; job Running again {_ms(run)}; "
            f"missing {len(mine) - len(term)}/{len(mine) - len(run)}; load avg "
            f"{min(ld.loadavg, default=0):.1f}-{max(ld.loadavg, default=0):.1f}; "
            f"actors' CPU {ld.cpu_s * 1000 / max(ld.faults, 1):,.0f} ms per fault"
        )
    a, m = stats["agent"], stats["mindcluster"]
    for key, what in (("terminating", "first old pod terminating"), ("running", "job Running again")):
        if a[key] and m[key]:
            say(f"ratio {what} (MindCluster / agent): p50 {pct(m[key], 0.5) / pct(a[key], 0.5):.2f}x, "
                f"p99 {pct(m[key], 0.99) / pct(a[key], 0.99):.2f}x")  # fmt: skip
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="a running testbed's folder (default: start a fresh one, stop it after)")
    parser.add_argument("--jobs", type=int, default=10, help="guide jobs, one fault each per round (default 10)")
    parser.add_argument("--runs", type=int, default=3, help="rounds per arm, alternated (default 3)")
    parser.add_argument("--first", type=int, default=0, choices=(0, 1), help="0: MindCluster's arm first")
    parser.add_argument(
        "--interval", type=float, default=3.0, help="seconds between faults in a round (default 3: each restart alone)"
    )
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after the jobs are ready, before faults")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for a round's jobs to recover")
    parser.add_argument("--volcano-restart", default="", help="the agent's policy.volcano_restart (default: its own)")
    parser.add_argument("--build", type=Path, default=None, help="build folder of build_mindcluster_scheduler.py")
    parser.add_argument("--dump", type=Path, default=None, help="write every fault's timings to this JSON file")
    parser.add_argument("--write", action="store_true", help="update the row in bench/RESULTS.md")
    args = parser.parse_args()
    args.build = args.build or build_scheduler(MIRROR, COMMIT, None)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    tb, close = open_testbed(args.dir)
    workdir = Path(tb.workdir) / "bench-plugin"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        faults, loads = asyncio.run(measure(tb, args, workdir))
    finally:
        close()
    stats = report(faults, loads)
    if args.dump:
        rows = [{**vars(f), "terminating_ms": _since(f, f.terminating_at), "running_ms": _since(f, f.running_at)}
                for f in faults]  # fmt: skip
        args.dump.write_text(json.dumps({"faults": rows, "loads": {k: vars(v) for k, v in loads.items()}}, indent=1))
    if args.write:
        a, m = stats["agent"], stats["mindcluster"]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        restart = args.volcano_restart or "the agent's default"
        la = {arm: f"{min(loads[arm].loadavg):.1f}-{max(loads[arm].loadavg):.1f}" for arm in ARMS}
        cpu = {arm: loads[arm].cpu_s * 1000 / max(loads[arm].faults, 1) for arm in ARMS}
        figure = (
            f"agent ({restart}): first old pod terminating p50 {pct(a['terminating'], 0.5):,.0f} / p99 "
            f"{pct(a['terminating'], 0.99):,.0f} ms, job Running again p50 {pct(a['running'], 0.5):,.0f} / p99 "
            f"{pct(a['running'], 0.99):,.0f} ms; {pct(m['terminating'], 0.5) / pct(a['terminating'], 0.5):.1f}x and "
            f"{pct(m['running'], 0.5) / pct(a['running'], 0.5):.2f}x sooner at p50; load avg {la['agent']}, agent + "
            f"stock scheduler {cpu['agent']:,.0f} ms CPU per fault"
        )
        baseline = (
            f"MindCluster's scheduler (ascend-for-volcano {COMMIT}, no agent): first old pod terminating p50 "
            f"{pct(m['terminating'], 0.5):,.0f} / p99 {pct(m['terminating'], 0.99):,.0f} ms, job Running again p50 "
            f"{pct(m['running'], 0.5):,.0f} / p99 {pct(m['running'], 0.99):,.0f} ms; load avg {la['mindcluster']}, "
            f"its scheduler {cpu['mindcluster']:,.0f} ms CPU per fault; {len(faults) // 2} faults per arm, "
            f"arms alternated; {started} UTC, tree at {commit}"
        )
        cmd = f"python bench/bench_plugin.py --jobs {args.jobs} --runs {args.runs} --interval {args.interval:g} --write"
        put_row(f"| {ROW} | {figure} | >= 10x and >= 3x sooner at p50 | {baseline} | `{cmd}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
