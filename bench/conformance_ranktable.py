"""Record what an Ascend Operator writes into ``rings-config-<job>`` around one AscendJob restart: MindCluster's
real operator (built from its source) or the testbed's stand-in, on a running testbed.

The job is the conformance driver's (``bench/conformance_ascendjob.py`` ``Driver.job``: the guide's PyTorch
AscendJob, Master + Worker of 8 chips, its ``rings-config-conf-job``). Steps: create it; wait until both pods run
and the table is ``completed``; delete the Worker pod (as a pod-level restart does); wait until its replacement
runs and the table is ``completed`` again; then 4 s of quiet. Every value ``hccl.json`` and ``version`` take is
recorded from a watch, reduced to a comparable shape (:func:`shape`): the status, the server count, whether the
servers are exactly the running pods (container IP and chips), rank ids, what ``server_id`` holds, and how
``version`` moves.

Usage::

    python bench/conformance_ranktable.py --dir DIR --operator real --binary /work/build-mc/ascend-operator \\
        --manifest /work/build-mc/component/ascend-operator/build/ascend-operator.yaml --out real.json
    python bench/conformance_ranktable.py --dir DIR --operator stand-in \\
        --manifest /work/build-mc/component/ascend-operator/build/ascend-operator.yaml --out standin.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from conformance_ascendjob import NODES, Driver, install_crd, real_operator  # noqa: E402

from testbed.cluster import Testbed  # noqa: E402
from testbed.inject import Injector  # noqa: E402
from testbed.rest import Rest  # noqa: E402

CM = "rings-config-conf-job"
CONFIG = "ascend.kubectl.kubernetes.io/ascend-910-configuration"


class Recorder:
    """Every (seconds since start, hccl.json, version) ``rings-config-conf-job`` takes, from a watch."""

    def __init__(self, rest: Rest, ns: str) -> None:
        self.rest, self.ns = rest, ns
        self.start = time.monotonic()
        self.values: list[tuple[float, str, str]] = []
        self.stop = threading.Event()
        listing = rest.get(f"/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3D{CM}")
        self.rv = listing["metadata"]["resourceVersion"]
        for cm in listing["items"]:
            self._add(cm)
        threading.Thread(target=self._watch, daemon=True).start()

    def _add(self, cm: dict[str, Any]) -> None:
        data = cm.get("data") or {}
        value = (data.get("hccl.json", ""), data.get("version", ""))
        if not self.values or self.values[-1][1:] != value:
            self.values.append((round(time.monotonic() - self.start, 2), *value))

    def _watch(self) -> None:
        while not self.stop.is_set():
            q = urllib.parse.urlencode(
                {"fieldSelector": f"metadata.name={CM}", "watch": "1", "resourceVersion": self.rv, "timeoutSeconds": 5}
            )
            req = urllib.request.Request(f"{self.rest.base}/api/v1/namespaces/{self.ns}/configmaps?{q}")
            req.add_header("Authorization", f"Bearer {self.rest.token}")
            with contextlib.suppress(OSError), urllib.request.urlopen(req, timeout=30, context=self.rest.ctx) as resp:
                for line in resp:
                    event = json.loads(line)
                    self.rv = event["object"]["metadata"].get("resourceVersion", self.rv)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._add(event["object"])

    def last_status(self) -> str:
        with contextlib.suppress(ValueError, IndexError):
            return str(json.loads(self.values[-1][1]).get("status"))
        return ""


def running(d: Driver, ns: str, but: set[str]) -> list[dict[str, Any]] | None:
    pods = [p for p in d.pods(ns) if not p["metadata"].get("deletionTimestamp")]
    ok = len(pods) == 2 and all(
        p.get("status", {}).get("phase") == "Running"
        and p["status"].get("podIP")
        and CONFIG in (p["metadata"].get("annotations") or {})
        and p["metadata"]["uid"] not in but
        for p in pods
    )
    return pods if ok else None


def wait(probe: Any, what: str, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.3)
    raise RuntimeError(f"not within {timeout_s:.0f} s: {what}")


def shape(text: str, version: str, pods: list[dict[str, Any]], previous_version: str) -> dict[str, Any]:
    """A table's comparable shape, against the pods running when it was written (or the last set)."""
    try:
        body = json.loads(text)
    except ValueError:
        return {"unreadable": text}
    servers = body.get("server_list") or []
    want = {
        (
            p["status"].get("podIP"),
            tuple(d["device_id"] for d in json.loads(p["metadata"]["annotations"][CONFIG])["devices"]),
        )
        for p in pods
    }
    got = {(s.get("container_ip"), tuple(d.get("device_id") for d in s.get("device") or [])) for s in servers}
    host_ips = {json.loads(p["metadata"]["annotations"][CONFIG])["host_ip"] for p in pods}
    return {
        "keys": list(body),
        "status": body.get("status"),
        "format": body.get("version"),
        "server_count": body.get("server_count"),
        "servers_are_these_pods": bool(servers) and got == want,
        "rank_ids": [d.get("rank_id") for s in servers for d in s.get("device") or []],
        "server_id_is_host_ip": bool(servers) and all(s.get("server_id") in host_ips for s in servers),
        "server_keys": sorted(servers[0]) if servers else [],
        "device_keys": sorted((servers[0].get("device") or [{}])[0]) if servers else [],
        "version": "0"
        if version == "0"
        else ("unset" if not version else ("same" if version == previous_version else "unix time")),
    }


def run(d: Driver) -> dict[str, Any]:
    ns = d.namespace("rt")
    rec = Recorder(d.rest, ns)
    steps: list[dict[str, Any]] = []
    try:
        d.job(ns)
        first = wait(lambda: running(d, ns, set()), "both pods Running")
        wait(lambda: rec.last_status() == "completed", "a completed table")
        time.sleep(2)
        mark = len(rec.values)
        worker = next(p for p in first if p["metadata"]["name"].endswith("worker-0"))
        d.delete(ns, worker["metadata"]["name"])
        second = wait(lambda: running(d, ns, {worker["metadata"]["uid"]}), "the Worker replaced")
        wait(lambda: rec.last_status() == "completed" and len(rec.values) > mark + 1, "a new completed table")
        time.sleep(4)
        previous = ""
        for i, (t, text, version) in enumerate(rec.values):
            pods = first if i < mark else second
            steps.append(
                {"t": t, "phase": "before" if i < mark else "after delete", **shape(text, version, pods, previous)}
            )
            previous = version
        steps.append({"raw": [list(v) for v in rec.values]})
    finally:
        rec.stop.set()
    return {"steps": steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--operator", choices=("real", "stand-in"), required=True)
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tb = Testbed.attach(Path(args.dir))
    rest = tb.rest()
    Injector(rest).add_nodes(NODES)
    install_crd(rest, args.manifest)
    ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext([])
    if args.operator == "real":
        ctx = real_operator(tb, args.binary.resolve(), args.manifest, Path(args.dir).resolve() / "real-ascend-operator")
    driver = Driver(rest, args.operator)
    record: dict[str, Any] = {"operator": args.operator, "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    with ctx as run_argv:
        record["argv"] = run_argv
        try:
            record.update(run(driver))
        finally:
            driver.cleanup()
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["steps"][:-1], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
