"""Conformance scenarios WITH the agent: an Ascend Operator (MindCluster's real binary or the testbed's stand-in)
and ``fault-agent run`` (act mode, the guide's job in force mode) around each scenario.

The sibling of ``bench/conformance_ascendjob.py`` (whose Driver, operator runner and snapshots it reuses): here the
driver only injects the faults (a business failure: the pod's status turned Failed; a chip fault: the node's
device-info ConfigMap, ``testbed/inject.py``), the agent decides and acts, and the record holds, per step, the
job's conditions, the pods' versions and phases and the PodGroup, plus the agent's events (read from Kafka) and the
job's ``remain-retry-times`` entry.

    python bench/conformance_agent.py --dir .tbc --operator real --binary ./ascend-operator \\
        --manifest ascend-operator.yaml --out real-agent.json
    python bench/conformance_agent.py --dir .tbc --operator stand-in --manifest ascend-operator.yaml \\
        --out stand-in-agent.json
    python bench/conformance_agent.py --compare real-agent.json stand-in-agent.json   # markdown table

Each scenario gets its own namespace and its own agent (``KUBE__NAMESPACES`` that namespace, Lease in it), started
before the job is submitted and stopped after the scenario. Docs: docs/mindcluster-conformance.md, "With the agent".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from conformance_ascendjob import (  # noqa: E402
    CM_NAME,
    CM_NS,
    JOBS,
    NODES,
    PGS,
    Driver,
    _fmt,
    _log,
    _shape,
    add_operator_args,
    error_step,
    operator_context,
    start_operator_run,
    utc_stamp,
)

from testbed.agent_runner import AgentProcess, EventReader, Received  # noqa: E402
from testbed.cluster import Testbed  # noqa: E402
from testbed.inject import ChipFault  # noqa: E402
from testbed.rest import Rest, RestError  # noqa: E402

NPU = "huawei.com/Ascend910"
CONFLICT = "the object has been modified"


class Events:
    """The agent's topics read from the beginning in a thread of their own (EventReader is asyncio)."""

    def __init__(self, bootstrap: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="events", daemon=True)
        self.thread.start()
        self.reader = EventReader(bootstrap)
        asyncio.run_coroutine_threadsafe(self.reader.start(from_beginning=True), self.loop).result(60)

    def for_job(self, uid: str) -> list[Received]:
        return [e for e in list(self.reader.events) if e.key == uid]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.reader.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def summary(e: Received) -> dict[str, Any]:
    """What the record keeps of one event: type, time, and the data that says what the agent decided."""
    data = e.event.get("data") or {}
    kind = e.type.removeprefix("io.faultagent.").removesuffix(".v1")
    out: dict[str, Any] = {"type": kind, "time": e.event.get("time")}
    if "fault" in data:
        f = data["fault"]
        out["fault"] = {k: f.get(k) for k in ("kind", "level", "node", "chips", "codes", "pod", "reason")}
    for k in ("incident_id", "attempt", "action", "reason", "detail", "budget_left", "acted_by", "dry_run"):
        if k in data:
            out[k] = data[k]
    if "durations" in data:
        out["durations"] = data["durations"]
    return out


def _when(e: dict[str, Any]) -> str:
    """An event's time, sortable as text: "…:40Z" (a fault's signal time, whole seconds) before "…:40.86Z"."""
    t = str(e.get("time") or "").removesuffix("Z")
    return (t if "." in t else t + ".").ljust(26, "0")


class AgentDriver(Driver):
    """The conformance Driver with an agent per scenario namespace and the agent's events per step."""

    def __init__(self, rest: Rest, operator: str, tb: Testbed, workdir: Path) -> None:
        super().__init__(rest, operator)
        self.tb = tb
        self._events: Events | None = None
        self.workdir = workdir
        self.agent: AgentProcess | None = None
        self.uid = ""
        self.seen = 0

    def namespace(self, tag: str) -> str:
        ns = super().namespace(tag)
        self.agent = AgentProcess(
            self.tb,
            self.workdir,
            name=f"agent-{ns}",
            settings={
                "CLUSTER_NAME": f"conf-{ns}",
                "KUBE__NAMESPACES": json.dumps([ns]),
                "LEADER__NAMESPACE": ns,
                "LEADER__NAME": f"fault-agent-{ns}",
                "POLICY__BREAKER_CONFIGMAP": f"fault-agent-breaker-{ns}",
                "POLICY__BREAKER_MIN_FAULTY_NODES": "1000",
                "POLICY__MODE": "act",
            },
        )
        self.agent.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.agent.metric("fault_agent_leader") != 1:
            time.sleep(0.3)
        _log(f"agent {self.agent.name} leads: {self.agent.metric('fault_agent_leader') == 1}")
        if self._events is None:  # the agent creates its topics: read them once they exist
            self._events = Events(self.tb.kafka_bootstrap)
        return ns

    @property
    def events(self) -> Events:
        assert self._events is not None
        return self._events

    def close(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        if self._events is not None:
            self._events.close()

    def job(self, ns: str, **kw: Any) -> dict[str, Any]:
        created = super().job(ns, **kw)
        self.uid, self.seen = created["metadata"]["uid"], 0
        return created

    def cleanup(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        super().cleanup()
        for node in NODES:
            self.injector.chip_healthy(node)

    # ----- the agent's side ------------------------------------------------------------------------------------
    def job_events(self) -> list[dict[str, Any]]:
        return [summary(e) for e in self.events.for_job(self.uid)]

    def wait_event(self, fragment: str, count: int = 1, timeout_s: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if sum(1 for e in self.events.for_job(self.uid) if fragment in e.type) >= count:
                return True
            time.sleep(0.3)
        return False

    def remain_retry_entry(self, ns: str) -> dict[str, Any] | None:
        try:
            cm = self.rest.get(f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}")
        except RestError:
            return None
        table = json.loads((cm.get("data") or {}).get("remain-retry-times") or "{}")
        entry: dict[str, Any] | None = table.get(f"{ns}/conf-job-{self.uid}")
        return entry

    def with_agent(self, ns: str, snap: dict[str, Any]) -> dict[str, Any]:
        """`snap` with the agent's events since the previous step and the job's remain-retry-times entry."""
        evs = self.job_events()
        snap["agent_events"] = sorted(evs[self.seen :], key=_when)  # two topics
        self.seen = len(evs)
        snap["remain_retry_entry"] = self.remain_retry_entry(ns)
        return snap

    def step(self, ns: str, name: str, *, running: bool = True, timeout_s: float = 60.0) -> dict[str, Any]:
        snap = self.wait_running(ns, name, timeout_s) if running else self.settle(ns, name)
        return self.with_agent(ns, snap)

    def chip_fault_on(self, ns: str, role: str = "master") -> str:
        """A SeparateNPU chip fault on the chip of `role`-0's first NPU (the pod's node); returns the node."""
        pod = next(p for p in self.pods(ns) if p["metadata"]["name"].endswith(f"-{role}-0"))
        chip = int(pod["metadata"]["annotations"][NPU].split(",")[0].rsplit("-", 1)[1])
        node = str(pod["spec"]["nodeName"])
        self.injector.chip_fault(node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        return node

    def wait_entry(self, ns: str, timeout_s: float = 20.0) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            entry = self.remain_retry_entry(ns)
            if entry is not None:
                return entry
            time.sleep(0.3)
        return None


# ----- scenarios ---------------------------------------------------------------------------------------------
Scenario = Callable[[AgentDriver], list[dict[str, Any]]]


def sa_business_failure(d: AgentDriver) -> list[dict[str, Any]]:
    """Business failure before any restart (fault-retry-times 3): the entry the agent writes, then worker-0 Failed."""
    ns = d.namespace("a")
    d.job(ns)
    out = [d.step(ns, "started")]
    d.wait_entry(ns)
    out.append(d.with_agent(ns, d.settle(ns, "entry written?")))
    d.fail(ns, "conf-job-worker-0")
    d.wait_event("recovery.", timeout_s=30)
    out.append(d.step(ns, "worker-0 Failed; the agent's turn"))
    return out


def sb_business_after_restart(d: AgentDriver) -> list[dict[str, Any]]:
    """A chip fault (the agent restarts the job), then a business failure."""
    ns = d.namespace("b")
    d.job(ns)
    out = [d.step(ns, "started")]
    d.chip_fault_on(ns)
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on master-0's node"))
    d.fail(ns, "conf-job-worker-0")
    d.wait_event("recovery.", count=3, timeout_s=30)
    out.append(d.step(ns, "worker-0 Failed; the agent's turn"))
    return out


def sc_chip_fault(d: AgentDriver) -> list[dict[str, Any]]:
    """A chip fault on master-0's node: the agent restarts the job (force)."""
    ns = d.namespace("c")
    d.job(ns)
    out = [d.step(ns, "started")]
    d.chip_fault_on(ns)
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on master-0's node"))
    return out


def sd_three_chip_faults(d: AgentDriver) -> list[dict[str, Any]]:
    """Three chip faults, backoffLimit 2."""
    ns = d.namespace("d")
    d.job(ns, backoff_limit=2)
    out = [d.step(ns, "started")]
    for i in range(1, 4):
        d.chip_fault_on(ns)
        d.wait_event("recovery.s" if i < 3 else "recovery.failed", count=2 * i if i < 3 else 1, timeout_s=60)
        out.append(d.step(ns, f"chip fault {i}", timeout_s=60 if i < 3 else 20))
    return out


def se_business_then_two_chip_faults(d: AgentDriver) -> list[dict[str, Any]]:
    """One business failure, then two chip faults; backoffLimit 2."""
    ns = d.namespace("e")
    d.job(ns, backoff_limit=2)
    out = [d.step(ns, "started")]
    d.wait_entry(ns)
    d.fail(ns, "conf-job-worker-0")
    d.wait_event("recovery.", timeout_s=30)
    out.append(d.step(ns, "worker-0 Failed; the agent's turn"))
    for i in range(1, 3):
        n = len([e for e in d.job_events() if e["type"].startswith("recovery.")])
        d.chip_fault_on(ns)
        d.wait_event("recovery.", count=n + 2, timeout_s=60)
        out.append(d.step(ns, f"chip fault {i}", timeout_s=60 if i < 2 else 20))
    return out


def sf_recover_strategy(d: AgentDriver) -> list[dict[str, Any]]:
    """recover-strategy annotation (PodGroup process-recover-enable=on), then a chip fault."""
    ns = d.namespace("f")
    d.job(ns, annotations={"recover-strategy": "recover"}, labels={"pod-rescheduling": "on"})
    out = [d.step(ns, "started (recover-strategy=recover)")]
    d.chip_fault_on(ns)
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on master-0's node"))
    return out


def sf2_recover_strategy_worker(d: AgentDriver) -> list[dict[str, Any]]:
    """recover-strategy annotation, pod-rescheduling on, then a chip fault on the worker's node (no master hit)."""
    ns = d.namespace("f2")
    d.job(ns, annotations={"recover-strategy": "recover"}, labels={"pod-rescheduling": "on"})
    out = [d.step(ns, "started (recover-strategy=recover)")]
    d.chip_fault_on(ns, "worker")
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on worker-0's node"))
    return out


def sf3_recover_strategy_alone(d: AgentDriver) -> list[dict[str, Any]]:
    """recover-strategy annotation alone (no pod-rescheduling label): a chip fault on the worker's node (issue 36's
    observed bug: the agent restarted the whole job); then the PodGroup's process-recover-enable set to ``pause``
    as ClusterD does when process recovery fails, and a chip fault on the worker's node again."""
    ns = d.namespace("f3")
    created = d.job(ns, annotations={"recover-strategy": "recover"})
    out = [d.step(ns, "started (recover-strategy=recover, no pod-rescheduling)")]
    d.chip_fault_on(ns, "worker")
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on worker-0's node"))
    d.rest.request(
        "PATCH",
        f"{PGS}/namespaces/{ns}/podgroups/conf-job-{created['metadata']['uid']}",
        {"metadata": {"labels": {"process-recover-enable": "pause"}}},
        content_type="application/merge-patch+json",
    )
    out.append(d.step(ns, "PodGroup process-recover-enable=pause (as ClusterD)"))
    d.chip_fault_on(ns, "worker")
    d.wait_event("recovery.succeeded", count=2, timeout_s=60)
    out.append(d.step(ns, "chip fault on worker-0's node, paused"))
    return out


def _guide_budgets(d: AgentDriver, tag: str, backoff_limit: int | None) -> list[dict[str, Any]]:
    """The guide's job (fault-retry-times 3): a business failure on worker-0, then three chip faults on master-0's
    node. As shipped (no backoffLimit: the operator takes 3 from fault-retry-times) the fourth restart is refused;
    with backoffLimit 4 all four are made."""
    ns = d.namespace(tag)
    d.job(ns, backoff_limit=backoff_limit)
    out = [d.step(ns, f"started (backoffLimit {backoff_limit if backoff_limit is not None else 'unset'})")]
    d.wait_entry(ns)
    d.fail(ns, "conf-job-worker-0")
    d.wait_event("recovery.s", count=2, timeout_s=60)
    out.append(d.step(ns, "worker-0 Failed; the agent's turn"))
    for i in range(1, 4):
        last = backoff_limit is None and i == 3
        n = len([e for e in d.job_events() if e["type"].startswith("recovery.")])
        d.chip_fault_on(ns)
        d.wait_event("recovery.", count=n + (1 if last else 2), timeout_s=60)
        out.append(d.step(ns, f"chip fault {i}", timeout_s=20 if last else 60))
    return out


def sh_guide_as_shipped(d: AgentDriver) -> list[dict[str, Any]]:
    """The guide's job as shipped: a business failure and three chip faults."""
    return _guide_budgets(d, "h", None)


def sh4_guide_backoff_limit_4(d: AgentDriver) -> list[dict[str, Any]]:
    """The guide's job with backoffLimit 4: a business failure and three chip faults."""
    return _guide_budgets(d, "h4", 4)


def sg_same_second(d: AgentDriver) -> list[dict[str, Any]]:
    """The job Running in the second it was created (resubmitted until so, at most 5 tries), then a chip fault."""
    ns = d.namespace("g")
    tries = 0
    snap: dict[str, Any] = {}
    while tries < 5:
        tries += 1
        d.job(ns)
        snap = d.step(ns, "started")
        times = {c["type"]: c["lastTransitionTime"] for c in snap["conditions"] if c["status"] == "True"}
        if times.get("Running") and times.get("Running") == times.get("Created"):
            break
        with contextlib.suppress(RestError):
            d.rest.request("DELETE", f"{JOBS}/namespaces/{ns}/ascendjobs/conf-job")
        with contextlib.suppress(RestError):
            d.rest.request("DELETE", f"/api/v1/namespaces/{ns}/configmaps/rings-config-conf-job")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and d.pods(ns):
            time.sleep(0.5)
        while time.monotonic() < deadline:
            try:
                d.rest.get(f"{JOBS}/namespaces/{ns}/ascendjobs/conf-job")
                time.sleep(0.3)
            except RestError:
                break
    snap["tries"] = tries
    out = [snap]
    d.chip_fault_on(ns)
    d.wait_event("recovery.succeeded", timeout_s=60)
    out.append(d.step(ns, "chip fault on master-0's node"))
    return out


SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "a": ("business failure before any restart (fault-retry-times 3)", sa_business_failure),
    "b": ("business failure after a restart (a chip fault's)", sb_business_after_restart),
    "c": ("chip fault, force restart", sc_chip_fault),
    "d": ("three chip faults, backoffLimit 2", sd_three_chip_faults),
    "e": ("business failure then two chip faults, backoffLimit 2", se_business_then_two_chip_faults),
    "f": ("recover-strategy annotation, then a chip fault", sf_recover_strategy),
    "f2": ("recover-strategy annotation, then a chip fault on the worker", sf2_recover_strategy_worker),
    "f3": (
        "recover-strategy annotation alone, a chip fault on the worker, then pause and another",
        sf3_recover_strategy_alone,
    ),
    "g": ("Running in its creation second, then a chip fault", sg_same_second),
    "h": ("the guide's job as shipped: a business failure and three chip faults", sh_guide_as_shipped),
    "h4": ("the guide's job with backoffLimit 4: a business failure and three chip faults", sh4_guide_backoff_limit_4),
}


# ----- comparison --------------------------------------------------------------------------------------------
def fmt_events(evs: list[dict[str, Any]], *, reasons: bool = True) -> str:
    parts = []
    for e in sorted(evs, key=_when):
        t = e["type"]
        if t == "fault.detected":
            f = e.get("fault") or {}
            pod = (f.get("pod") or {}).get("name", "-").removeprefix("conf-job-")
            parts.append(f"fault.detected({f.get('kind')}/{f.get('level')}, pod {pod})")
        elif t == "recovery.started":
            parts.append(f"recovery.started({e.get('action')}, budget_left {e.get('budget_left')})")
        elif t == "recovery.failed":
            why = f": {e.get('reason')}" + (f" / {e.get('detail')}" if e.get("detail") else "") if reasons else ""
            parts.append(f"recovery.failed({e.get('action')}){why}")
        elif t == "recovery.succeeded":
            parts.append(f"recovery.succeeded({e.get('action')})")
        else:
            parts.append(t)
    return "<br>".join(parts) or "-"


def _agent_shape(evs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The events that must match, in a fixed order (the two topics' events can land in either order)."""
    return sorted(
        ((e["type"], e.get("action") or "", e.get("budget_left", -1)) for e in evs if e["type"] != "fault.cleared"),
        key=repr,
    )


def compare(real: dict[str, Any], stand_in: dict[str, Any]) -> str:
    lines = [
        "| scenario | step | real operator | agent (real) | stand-in | agent (stand-in) | match |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, (title, _) in SCENARIOS.items():
        r, s = real["scenarios"].get(key, []), stand_in["scenarios"].get(key, [])
        r_first = next((x["conditions"][0]["lastTransitionTime"] for x in r if x.get("conditions")), None)
        s_first = next((x["conditions"][0]["lastTransitionTime"] for x in s if x.get("conditions")), None)
        for i in range(max(len(r), len(s))):
            rs, ss = (r[i] if i < len(r) else None), (s[i] if i < len(s) else None)
            same_op = rs is not None and ss is not None and _shape(rs, r_first) == _shape(ss, s_first)
            same_agent = (
                rs is not None
                and ss is not None
                and _agent_shape(rs.get("agent_events", [])) == _agent_shape(ss.get("agent_events", []))
            )
            match = "yes" if same_op and same_agent else ("operator yes, agent **no**" if same_op else "**no**")
            if same_agent and not same_op:
                match = "agent yes, operator **no**"
            step = (rs or ss or {}).get("step", "")

            def op(x: dict[str, Any] | None) -> str:
                if x is None:
                    return "-"
                if x.get("error"):
                    return f"error: {x['error']}"
                entry = x.get("remain_retry_entry")
                return _fmt(x) + f"<br>remain-retry-times {entry['Times'] if entry else 'none'}"

            r_ev = fmt_events(rs.get("agent_events", []) if rs else [])
            s_ev = fmt_events(ss.get("agent_events", []) if ss else [])
            lines.append(
                f"| {key} {title if i == 0 else ''} | {step} | {op(rs)} | {r_ev} | {op(ss)} | {s_ev} | {match} |"
            )
    return "\n".join(lines)


def _log_offset(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    add_operator_args(parser)
    args = parser.parse_args(argv)
    if args.compare:
        real, stand_in = (json.loads(p.read_text()) for p in args.compare)
        print(compare(real, stand_in))
        return 0
    tb, rest, keys = start_operator_run(parser, args, list(SCENARIOS))
    workdir = Path(args.dir).resolve() / "conformance-agent" / args.operator
    record: dict[str, Any] = {"operator": args.operator, "with_agent": True, "started": utc_stamp(), "scenarios": {}}
    op_dir = Path(args.dir).resolve() / "real-ascend-operator"
    op_log = op_dir / "ascend-operator.log"
    offset = _log_offset(op_log)
    driver = AgentDriver(rest, args.operator, tb, workdir)
    try:
        with operator_context(tb, args, op_dir) as run_argv:
            record["argv"] = run_argv
            for key in keys:
                title, fn = SCENARIOS[key]
                _log(f"scenario {key}: {title}")
                started = utc_stamp()
                try:
                    record["scenarios"][key] = fn(driver)
                except (RestError, RuntimeError, KeyError, StopIteration) as e:
                    record["scenarios"][key] = [error_step(e, agent_events=driver.job_events())]
                    _log(f"scenario {key} failed: {e!r}")
                time.sleep(3)  # late events (recovery.* after the last step)
                late = driver.job_events()[driver.seen :]
                if late and record["scenarios"][key]:
                    record["scenarios"][key][-1].setdefault("agent_events", []).extend(late)
                record.setdefault("windows", {})[key] = [started, utc_stamp()]
                driver.cleanup()
                args.out.write_text(json.dumps(record, indent=1) + "\n")
    finally:
        driver.close()
    if args.operator == "real":
        with op_log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        hits = [line for line in text.splitlines() if CONFLICT in line]
        record["operator_log"] = {"lines": len(text.splitlines()), "conflicts": len(hits), "conflict_lines": hits}
        _log(f"operator log: {len(hits)} lines with {CONFLICT!r}")
    record["finished"] = utc_stamp()
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
