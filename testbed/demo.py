"""`python -m testbed.demo [--dir .testbed]` (`make demo`): one chip fault, recovered, with a timeline in ms.

Steps: start the testbed in ``--dir`` (or reuse it when every component there is running), add kwok nodes like
the integration guide's, submit the guide's Volcano Job (``config/examples/vcjob-mindx-dls-test.yaml``, its
rings-config first) with ``fault-agent submit --wait``, start ``fault-agent run``, inject a SeparateNPU chip
fault on a node running one of the job's pods, and print:

- the timeline, in milliseconds after the fault's ConfigMap write returned: seen by the agent (the fault's
  ``observed_at`` in its event), fault event in Kafka (the record's broker timestamp), restart requested (the
  agent's JSON log: RestartJob Command created), the Command seen by a watch, old pods gone, new pods Running,
  job Running again, and the ``recovery succeeded`` event;
- the Kafka events received (type, subject, key) and the metrics URL.

On a terminal the agent and testbed keep running until Ctrl-C; otherwise the agent is stopped and the testbed
left running, so a second run reuses it (``python -m testbed down --dir .testbed`` stops it). All clocks are this
machine's, so the times compare directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.agent_runner import FAULTS_TOPIC, RECOVERIES_TOPIC, AgentProcess, EventReader, Received
from testbed.cluster import Testbed, TestbedError
from testbed.inject import HEARTBEAT_LABEL, ChipFault, Injector
from testbed.observe import Seen, TimedRest, WatchRecorder, ensure_topics, timestamp_types
from testbed.rest import RestError

ROOT = Path(__file__).resolve().parent.parent
JOB_FILE = ROOT / "config" / "examples" / "vcjob-mindx-dls-test.yaml"
NAMESPACE = "vcjob"
JOB = "mindx-dls-test"
REPLICAS = 2
TAINT_KEY = "fault-agent.io/fault"
VCJOBS = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
COMMANDS = f"/apis/bus.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/commands"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"

console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


class DemoError(Exception):
    """A demo step failed; the message names the step and the log to read."""


@contextlib.contextmanager
def step(name: str, log: Path | str) -> Iterator[None]:
    """Run one step; any failure becomes a DemoError naming the step and its log."""
    started = time.monotonic()
    console.print(f"[bold]▸ {name}[/bold]")
    try:
        yield
    except DemoError:
        raise
    except (Exception, TimeoutError) as e:
        raise DemoError(f"step '{name}' failed: {e}\n  log: {log}") from e
    console.print(f"  [dim]done in {time.monotonic() - started:.1f} s[/dim]")


@dataclass
class Mark:
    """One timeline row: what happened, when (time.time() seconds, or None if not seen), how it was measured."""

    what: str
    at: float | None
    source: str


def start_testbed(workdir: Path) -> tuple[Testbed, bool]:
    """Reuse the testbed in `workdir` when all its components run; else (re)start it. Returns (testbed, reused)."""
    try:
        existing: Testbed | None = Testbed.attach(workdir)
    except TestbedError:
        existing = None
    if existing is not None and all(s == "running" for s in existing.status().values()):
        return existing, True
    if existing is not None:
        existing.down()
        shutil.rmtree(workdir, ignore_errors=True)
    tb = Testbed(workdir, die_with_parent=False)
    tb.up()
    return tb, False


def reset_nodes(rest: Any, names: list[str]) -> None:
    """Add the kwok nodes and make them healthy again after an earlier run: chips healthy, heartbeat on,
    no quarantine taint left by the agent."""
    inj = Injector(rest)
    inj.add_nodes(names)
    for name in names:
        inj.chip_healthy(name)
        node = rest.get(f"/api/v1/nodes/{name}")
        if node["metadata"].get("labels", {}).get(HEARTBEAT_LABEL) == "off":
            inj.node_ready(name)
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != TAINT_KEY]
        if len(kept) != len(taints):
            rest.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}})


def remove_old_job(rest: Any, timeout_s: float = 60.0) -> None:
    """Delete the demo job left by an earlier run and wait until its pods are gone."""
    rest.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    try:
        rest.request("DELETE", f"{VCJOBS}/{JOB}", {"propagationPolicy": "Foreground"})
    except RestError as e:
        if e.status != 404:
            raise
    deadline = time.monotonic() + timeout_s
    selector = f"volcano.sh/job-name={JOB}"
    while True:
        job_left = True
        try:
            rest.get(f"{VCJOBS}/{JOB}")
        except RestError as e:
            if e.status != 404:
                raise
            job_left = False
        pods = rest.get(f"{PODS}?labelSelector={selector}").get("items", [])
        if not job_left and not pods:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the previous {JOB} job and its pods were not deleted within {timeout_s:.0f} s")
        time.sleep(0.3)


def submit_job(tb: Testbed, log: Path) -> None:
    """`fault-agent submit -f <guide's job> --wait` (rings-config first, as the file orders it)."""
    cmd = [sys.executable, "-m", "agent", "submit", "-f", str(JOB_FILE), "--wait", "--timeout", "120"]
    cmd += ["--kubeconfig", str(tb.kubeconfig)]
    with log.open("w") as out:
        res = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, timeout=180)
    text = log.read_text(errors="replace")
    for line in text.splitlines()[-4:]:
        console.print(f"  [dim]{line}[/dim]")
    if res.returncode != 0:
        raise RuntimeError(f"fault-agent submit exited with {res.returncode}")


def job_pods(rest: Any) -> list[dict[str, Any]]:
    items = rest.get(f"{PODS}?labelSelector=volcano.sh/job-name={JOB}").get("items", [])
    return sorted(
        (p for p in items if not p["metadata"].get("deletionTimestamp")), key=lambda p: str(p["metadata"]["name"])
    )


def wait_pods_ready(rest: Any, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The job's pods once REPLICAS of them run with chips annotated by the npu-plugin."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = job_pods(rest)
        ready = [
            p
            for p in pods
            if p.get("status", {}).get("phase") == "Running"
            and p["metadata"].get("annotations", {}).get("huawei.com/Ascend910")
        ]
        if len(ready) >= REPLICAS:
            return ready
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ready)}/{REPLICAS} job pods Running with chips after {timeout_s:.0f} s")
        time.sleep(0.2)


def agent_log_times(log: Path, since: float) -> dict[str, float]:
    """From the agent's JSON log: the first 'decision' and 'write done' (restart-command) after `since`."""
    out: dict[str, float] = {}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
            at = datetime.fromisoformat(str(rec["timestamp"]).replace("Z", "+00:00")).timestamp()
        except (ValueError, KeyError):
            continue
        if at < since - 1:
            continue
        ev = rec.get("event")
        if ev == "decision" and "decision" not in out:
            out["decision"] = at
        if ev == "write done" and rec.get("action") == "restart-command" and "command" not in out:
            out["command"] = at
    return out


def replaced_at(events: list[Seen], old_uids: set[str], t0: float) -> tuple[float | None, list[str]]:
    """When REPLICAS pods with new UIDs were Running at once (and their nodes), from the pod watch."""
    phase: dict[str, tuple[str, str]] = {}
    for seen in events:
        if seen.at < t0 or seen.uid in old_uids:
            continue
        if seen.type == "DELETED":
            phase.pop(seen.uid, None)
            continue
        node = str(seen.obj.get("spec", {}).get("nodeName", ""))
        phase[seen.uid] = (str(seen.obj.get("status", {}).get("phase", "")), node)
        running = [n for p, n in phase.values() if p == "Running"]
        if len(running) >= REPLICAS:
            return seen.at, sorted(running)
    return None, []


def old_gone_at(events: list[Seen], old_uids: set[str]) -> float | None:
    gone = [s.at for s in events if s.type == "DELETED" and s.uid in old_uids]
    return max(gone) if len(gone) >= len(old_uids) else None


def zero_point(sent_s: float) -> float:
    """The timeline's zero for a fault write sent at `sent_s` (unix seconds): the send time cut to whole ms.

    Nothing can see the write before it is sent, and every later stamp the timeline shows (the agent's log, the
    event's observed_at, Kafka record times) has millisecond resolution, so cutting the zero to the same
    resolution keeps every step at or after it (the PUT's return is not the zero: a watcher often reacts first).
    """
    return math.floor(sent_s * 1000) / 1000


def _ms(at: float | None, t0: float) -> str:
    return "—" if at is None else f"{(at - t0) * 1000:9.1f}"


def print_timeline(marks: list[Mark], t0: float, fault_node: str, new_nodes: list[str]) -> None:
    table = Table(title=f"Chip fault on {fault_node} (chip Ascend910-0, SeparateNPU) → recovery", title_justify="left")
    table.add_column("step")
    table.add_column("ms after the write was sent", justify="right")
    table.add_column("measured by", style="dim")
    for m in marks:
        table.add_row(m.what, _ms(m.at, t0), m.source)
    console.print(table)
    if new_nodes:
        console.print(f"new pods run on: {', '.join(new_nodes)} (faulty node {fault_node})")


def recovery_took(t0: float, running_at: float | None, succeeded: dict[str, Any] | None) -> str:
    """The demo's one answer to "how long did recovery take": from the fault write (`t0`, unix s) to the job
    Running again (`running_at`, the vcjob watch), and the agent's own figure from the recovery.succeeded event
    (`succeeded`, its CloudEvent JSON: ``data.durations.total_s``, counted from the fault's own time, which the
    device plugin writes in whole seconds, so it can read up to a second longer)."""
    if running_at is None:
        return "recovery took: the job did not run again while the demo watched"
    took = f"recovery took {(running_at - t0) * 1000:.0f} ms (fault written → job Running again)"
    total = ((succeeded or {}).get("data") or {}).get("durations", {}).get("total_s")
    if isinstance(total, int | float):
        took += f"; the agent's own figure {total:.2f} s (recovery.succeeded durations.total_s, from the fault's time)"
    return took


def print_events(events: list[Received], t0: float) -> None:
    table = Table(title="Kafka events received (ms after the fault)", title_justify="left")
    for col in ("ms", "topic", "type", "subject", "key"):
        table.add_column(col, justify="right" if col == "ms" else "left", overflow="fold")
    for e in sorted(events, key=lambda e: e.timestamp_ms):
        table.add_row(
            f"{e.timestamp_ms - t0 * 1000:.0f}", e.topic, e.type, str(e.event.get("subject", "")), e.key or "—"
        )
    console.print(table)


@dataclass
class Prepared:
    tb: Testbed
    workdir: Path
    demo_dir: Path
    pods: list[dict[str, Any]]


def prepare(args: argparse.Namespace) -> Prepared:
    """Testbed up (or reused), nodes healthy, the guide's job submitted and Running with chips annotated."""
    workdir = Path(args.dir)
    demo_dir = workdir.resolve() / "demo"
    with step("testbed", workdir / "logs"):
        started = time.monotonic()
        tb, reused = start_testbed(workdir)
        console.print(
            f"  {'reused the running testbed' if reused else 'started the testbed'} in {workdir} "
            f"({time.monotonic() - started:.1f} s)"
        )
    demo_dir.mkdir(parents=True, exist_ok=True)
    rest = tb.rest()
    nodes = [f"node-{i}" for i in range(args.nodes)]
    with step(f"kwok nodes {nodes[0]}..{nodes[-1]} (8 × huawei.com/Ascend910 each)", workdir / "logs" / "kwok.log"):
        reset_nodes(rest, nodes)
        remove_old_job(rest)
    submit_log = demo_dir / "submit.log"
    with step(f"submit the guide's Volcano Job {NAMESPACE}/{JOB} and wait until Running", submit_log):
        submit_job(tb, submit_log)
        pods = wait_pods_ready(rest)
    return Prepared(tb, workdir, demo_dir, pods)


async def run(args: argparse.Namespace, prep: Prepared) -> int:
    tb, workdir, demo_dir, pods = prep.tb, prep.workdir, prep.demo_dir, prep.pods
    rest = tb.rest()
    agent = AgentProcess(tb, demo_dir, settings={"CLUSTER_NAME": "demo"}, name="demo-agent")
    reader = EventReader(tb.kafka_bootstrap)
    recorders: list[WatchRecorder] = []
    try:
        with step("start the agent (fault-agent run)", agent.log):
            await ensure_topics(tb.kafka_bootstrap, (FAULTS_TOPIC, RECOVERIES_TOPIC))
            ts_types = await timestamp_types(tb.kafka_bootstrap, (FAULTS_TOPIC,))
            # from the topics' start: a consumer at 'latest' on just-created topics can miss the first records;
            # earlier runs' events are told apart by the job's UID and their timestamps
            await reader.start(from_beginning=True)
            agent.start(ready_timeout_s=60)
            deadline = time.monotonic() + 30
            while agent.metric("fault_agent_leader") < 1:
                if time.monotonic() > deadline:
                    raise TimeoutError("the agent did not become leader within 30 s")
                await asyncio.sleep(0.2)
            console.print(f"  ready and leading; metrics at {agent.url}/metrics")
        fault_node = str(pods[0]["spec"]["nodeName"])
        old_uids = {str(p["metadata"]["uid"]) for p in pods}
        job_obj = rest.get(f"{VCJOBS}/{JOB}")
        job_uid = str(job_obj["metadata"]["uid"])
        old_version = int(job_obj.get("status", {}).get("version", 0))
        with step("watch Commands, pods and the job", workdir / "logs" / "kube-apiserver.log"):
            for path, selector in ((COMMANDS, ""), (PODS, f"volcano.sh/job-name={JOB}"), (VCJOBS, "")):
                rec = WatchRecorder(tb, path, label_selector=selector)
                await rec.start()
                recorders.append(rec)
        commands, pod_watch, job_watch = recorders
        timed = TimedRest.of(tb)
        with step(f"inject a chip fault: {fault_node} chip Ascend910-0, code 80E3A201, SeparateNPU", agent.log):
            Injector(timed).chip_fault(fault_node, [ChipFault(0)])
            t0 = zero_point(timed.last_write("mindx-dl-deviceinfo-", sent=True))
            put_answered = timed.last_write("mindx-dl-deviceinfo-")

        # The topics are read from the beginning: a run before this one left events of the same job there, so
        # only events of this run's fault count (record time from 1 s before the fault, for clock noise).
        def this_run(e: Any) -> bool:
            return bool(e.key == job_uid and e.timestamp_ms >= t0 * 1000 - 1000)

        with step("follow the recovery", agent.log):
            detected = await reader.wait_for(
                lambda e: "fault.detected" in e.type and this_run(e), timeout_s=30, what="fault.detected event"
            )
            cmd = await commands.wait_for(
                lambda s: s.type == "ADDED" and s.at >= t0 and s.obj.get("target", {}).get("name") == JOB,
                timeout_s=30,
                what="RestartJob Command",
            )
            running = await job_watch.wait_for(
                lambda s: (
                    s.at >= t0
                    and s.name == JOB
                    and int(s.obj.get("status", {}).get("version", 0)) > old_version
                    and s.obj.get("status", {}).get("state", {}).get("phase") == "Running"
                ),
                timeout_s=90,
                what=f"job {JOB} Running again after the restart",
            )
            with contextlib.suppress(TimeoutError):
                await reader.wait_for(
                    lambda e: "recovery.succeeded" in e.type and this_run(e),
                    timeout_s=15,
                    what="recovery.succeeded event",
                )
        seen_s = datetime.fromisoformat(detected[0].event["data"]["fault"]["observed_at"].replace("Z", "+00:00"))
        logged = agent_log_times(agent.log, t0)
        new_at, new_nodes = replaced_at(pod_watch.events, old_uids, t0)
        succeeded = [e for e in reader.events if "recovery.succeeded" in e.type and this_run(e)]
        ts_kind = ts_types.get(FAULTS_TOPIC, "CreateTime")
        marks = [
            Mark("fault written (device-plugin ConfigMap)", t0, "injector: PUT sent (the zero point)"),
            Mark("  write answered by the apiserver", put_answered, "injector: PUT returned"),
            Mark("seen by the agent", seen_s.timestamp(), "fault.observed_at in the event"),
            Mark("fault decision (restart job)", logged.get("decision"), "agent JSON log"),
            Mark("fault event in Kafka", detected[0].timestamp_ms / 1000, f"record timestamp ({ts_kind})"),
            Mark("restart issued (RestartJob Command created)", logged.get("command"), "agent JSON log"),
            Mark("  Command seen by a watch", cmd.at, "watch in this process"),
            Mark("old pods gone", old_gone_at(pod_watch.events, old_uids), "pod watch"),
            Mark("pods replaced (new UIDs Running)", new_at, "pod watch"),
            Mark("job Running", running.at, "vcjob watch: status.state.phase"),
            Mark(
                "recovery.succeeded event in Kafka",
                succeeded[0].timestamp_ms / 1000 if succeeded else None,
                f"record timestamp ({'LogAppendTime' if ts_kind == 'LogAppendTime' else 'CreateTime'})",
            ),
        ]
        console.print()
        print_timeline(marks, t0, fault_node, new_nodes)
        print_events([e for e in reader.events if e.timestamp_ms >= t0 * 1000 - 1000], t0)
        console.print(f"[bold]{recovery_took(t0, running.at, succeeded[0].event if succeeded else None)}[/bold]")
        recoveries = agent.metric("fault_agent_recovery_seconds_count")
        live = "" if args.keep else "; the agent stops when the demo ends, --keep leaves it running"
        console.print(f"metrics: {agent.url}/metrics  (fault_agent_recovery_seconds_count {recoveries:.0f}{live})")
        console.print(f"agent log: {agent.log}")
        if not succeeded:
            console.print(
                "[red]no recovery.succeeded event for this fault within 15 s of the job running again[/red]: "
                "see the agent log above"
            )
            return 1
        if args.keep:
            console.print(
                "\nThe agent and the testbed keep running: try "
                f'`eval "$({_python()} -m testbed env --dir {workdir})"` and `{_python()} -m testbed inject --help`.\n'
                f"Ctrl-C stops the agent; `python -m testbed down --dir {workdir}` stops the testbed."
            )
            with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
                await asyncio.to_thread(_wait_for_exit, agent)
            console.print(f"\nagent stopped; the testbed keeps running (stop it: {_down_hint(workdir)})")
        else:
            console.print(f"\nTestbed left running for a fast second run; stop it: {_down_hint(workdir)}")
        return 0
    finally:
        for rec in recorders:
            await rec.stop()
        await reader.stop()
        agent.stop()


def _wait_for_exit(agent: AgentProcess) -> None:
    if agent.proc is not None:
        agent.proc.wait()


def _python() -> str:
    """How to call this interpreter from the clone's root: .venv/bin/python when that is the one running."""
    exe = Path(sys.executable)
    return str(exe.relative_to(Path.cwd())) if exe.is_relative_to(Path.cwd()) else str(exe)


def _down_hint(workdir: Path) -> str:
    return f"{_python()} -m testbed down --dir {workdir}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".testbed", help="testbed folder (default: .testbed)")
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes to add (default 4; the job needs 3)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument("--keep", dest="keep", action="store_true", help="keep the agent running until Ctrl-C")
    keep.add_argument("--no-keep", dest="keep", action="store_false", help="stop the agent at the end")
    parser.set_defaults(keep=sys.stdin.isatty())
    args = parser.parse_args(argv)
    if args.nodes < REPLICAS + 1:
        parser.error(f"--nodes must be at least {REPLICAS + 1} (the job's pods and a spare node)")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # aiokafka warns about partition leaders of topics created a moment ago; it retries by itself
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        prep = prepare(args)
        return asyncio.run(run(args, prep))
    except KeyboardInterrupt:
        return 130
    except DemoError as e:
        console.print(f"[bold red]demo failed:[/bold red] {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
