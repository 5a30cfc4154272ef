"""A stand-in for ClusterD's reporter: aggregates the per-node ConfigMaps into ``cluster-info-*`` as ClusterD does.

ClusterD watches every ConfigMap labelled ``mx-consumer-cim=true`` (the device plugin's
``kube-system/mindx-dl-deviceinfo-<node>``, A3 switch info included, and NodeD's ``mindx-dl/mindx-dl-nodeinfo-
<node>``), verifies each one's CheckCode and writes, into its namespace (``mindx-dl``) with label
``mx-consumer-volcano=true``, ``cluster-info-device-<i>`` and ``cluster-info-switch-<i>`` (chunks of at most
800 KiB; their number never shrinks, a chunk no longer needed holds an empty string) and ``cluster-info-node-cm``
(an empty string when no node reports). Each data key is the ConfigMap's name and holds a JSON map from the
per-node name to its flat entry. It rewrites them after every change and at least every 5 s.
Source: Ascend/mind-cluster component/clusterd/pkg/application/resource/report.go and the files named in
testbed/mcencode/shapes.go.

This process does the list+watch and the writes; what ClusterD reads and what it writes is decided and encoded by
our Go program (``mcencode serve``, testbed/mcencode/clusterd.go), never by Python. Of ClusterD's fault processing
it does the pre-separate rules (a chip with a PreSeparateNPU fault leaves the available list and is listed
unhealthy only while no pod holds it; a node or switch whose most severe fault is pre-separate reports NodeStatus
``Healthy`` while pods hold chips on it, else ``UnHealthy``), reading which chips pods hold once a second. What it
does not do: public faults merged into the device entries, the retry, custom (per-job filter) and
manual-separation processors (docs/mindcluster-conformance.md "ClusterD" lists what the real one does there).

Run: ``python -m testbed.clusterd --kubeconfig FILE [--namespace NS]`` (the e2e tests write into their own
namespace so no other test reads their aggregate).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from testbed.encoder import EncodeError, Encoder
from testbed.rest import Rest, RestError

SOURCE_LABEL = "mx-consumer-cim=true"
RESYNC_S = 5.0
"""ClusterD rewrites its ConfigMaps at least this often (report.go atLeastReportCycle)."""
PROCESS_S = 1.0
"""ClusterD processes what it read once a second (faultmanager/fault_process_center.go) and reports what changed;
the stand-in reads which chips pods hold as often."""
REAL_ANNOTATION = "huawei.com/AscendReal"


def _log(msg: str) -> None:
    print(f"clusterd: {msg}", file=sys.stderr, flush=True)


def _slim(cm: dict[str, Any]) -> dict[str, Any]:
    meta = cm.get("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
        "data": cm.get("data") or {},
    }


class ClusterDWriter:
    """Feeds per-node ConfigMaps to the Go aggregator and writes its report.

    Args:
        rest: admin client of the testbed.
        namespace: where the ``cluster-info-*`` ConfigMaps go (ClusterD's is ``mindx-dl``).
        encoder: a dedicated ``mcencode serve`` (it holds the aggregate; not the shared one).
    """

    def __init__(self, rest: Rest, namespace: str, encoder: Encoder) -> None:
        self.rest = rest
        self.namespace = namespace
        self.encoder = encoder
        self.known: set[tuple[str, str]] = set()
        self.written: dict[str, dict[str, str]] = {}
        self.dirty = threading.Event()
        self.listed = threading.Event()
        self.last_write = 0.0

    def observe(self, kind: str, cm: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of a labelled ConfigMap."""
        slim = _slim(cm)
        key = (slim["metadata"]["namespace"], slim["metadata"]["name"])
        try:
            if kind == "DELETED":
                self.known.discard(key)
                if self.encoder.request("clusterd-delete", configmap=slim):
                    self.dirty.set()
            elif self.encoder.request("clusterd-put", configmap=slim):
                self.known.add(key)
                self.dirty.set()
        except EncodeError as e:  # ClusterD logs a ConfigMap it cannot read and keeps what it had
            _log(f"{key[0]}/{key[1]} not taken: {e}")

    def relisted(self, items: list[dict[str, Any]]) -> None:
        """A fresh list: everything in it is put, everything known but absent from it deleted."""
        seen = set()
        for cm in items:
            self.observe("ADDED", cm)
            meta = cm.get("metadata", {})
            seen.add((meta.get("namespace", ""), meta.get("name", "")))
        for ns, name in sorted(self.known - seen):
            self.observe("DELETED", {"metadata": {"namespace": ns, "name": name}})
        self.dirty.set()  # ClusterD reports once it has read everything, also when there is nothing
        self.listed.set()

    def report(self, *, force: bool = False) -> int:
        """Write the ConfigMaps whose content changed (all of them when `force`); returns how many were written."""
        cms: list[dict[str, Any]] = self.encoder.request("clusterd-report", namespace=self.namespace)
        n = 0
        for cm in cms:
            name = cm["metadata"]["name"]
            if not force and self.written.get(name) == cm["data"]:
                continue
            try:
                self.rest.request("PUT", f"/api/v1/namespaces/{self.namespace}/configmaps/{name}", cm)
            except RestError as e:
                if e.status != 404:
                    _log(f"writing {name} failed: {e}")
                    continue
                self.rest.request("POST", f"/api/v1/namespaces/{self.namespace}/configmaps", cm)
            self.written[name] = cm["data"]
            n += 1
        self.last_write = time.monotonic()
        return n

    def used_chips(self) -> dict[str, list[str]]:
        """Node name -> the chips (``Ascend910-0``…) that its pods not yet Failed or Succeeded hold, from their
        ``huawei.com/AscendReal`` annotation, as ClusterD's pod cache answers it
        (component/clusterd/pkg/domain/pod/pod_util.go GetUsedDevicesByNodeName)."""
        q = urllib.parse.urlencode({"fieldSelector": "status.phase!=Failed,status.phase!=Succeeded"})
        used: dict[str, set[str]] = {}
        for pod in self.rest.get(f"/api/v1/pods?{q}").get("items", []):
            node = pod.get("spec", {}).get("nodeName")
            real = (pod.get("metadata", {}).get("annotations") or {}).get(REAL_ANNOTATION)
            if node and real:
                used.setdefault(node, set()).update(c for c in real.split(",") if c)
        return {node: sorted(chips) for node, chips in sorted(used.items())}

    def write_loop(self, stop: threading.Event, *, debounce_s: float = 0.1) -> None:
        """After the first list, report after each change (changes within `debounce_s` together), after a change
        of the chips pods hold (read every PROCESS_S), and at least every RESYNC_S."""
        while not stop.is_set() and not self.listed.wait(timeout=1.0):
            pass
        last_forced = time.monotonic()
        while not stop.is_set():
            changed = self.dirty.wait(timeout=PROCESS_S)
            if stop.is_set():
                return
            if changed:
                time.sleep(debounce_s)
                self.dirty.clear()
            try:
                self.encoder.request("clusterd-used", used=self.used_chips())
                force = time.monotonic() - last_forced >= RESYNC_S
                self.report(force=force)
                if force:
                    last_forced = time.monotonic()
            except (RestError, OSError, EncodeError) as e:
                _log(f"report failed: {e}")
                time.sleep(0.5)


def _watch(rest: Rest, writer: ClusterDWriter, stop: threading.Event) -> None:
    listing = rest.get(f"/api/v1/configmaps?labelSelector={urllib.parse.quote(SOURCE_LABEL)}")
    writer.relisted(listing.get("items", []))
    rv = listing["metadata"]["resourceVersion"]
    while not stop.is_set():
        query = urllib.parse.urlencode(
            {"watch": "1", "resourceVersion": rv, "labelSelector": SOURCE_LABEL, "timeoutSeconds": "60"}
        )
        req = urllib.request.Request(f"{rest.base}/api/v1/configmaps?{query}")
        req.add_header("Authorization", f"Bearer {rest.token}")
        with urllib.request.urlopen(req, timeout=90, context=rest.ctx) as resp:
            for line in resp:
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # 410 Gone and the like: list again
                obj = event["object"]
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if event["type"] != "BOOKMARK":
                    writer.observe(event["type"], obj)


def rest_from_kubeconfig(path: Path) -> Rest:
    """The admin client the testbed's kubeconfig describes (token + CA)."""
    cfg = yaml.safe_load(path.read_text())
    cluster = cfg["clusters"][0]["cluster"]
    return Rest(cluster["server"], cfg["users"][0]["user"]["token"], Path(cluster["certificate-authority"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="mindx-dl", help="where cluster-info-* go (default mindx-dl)")
    args = parser.parse_args(argv)
    rest = rest_from_kubeconfig(Path(args.kubeconfig))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    encoder = Encoder()
    writer = ClusterDWriter(rest, args.namespace, encoder)
    threading.Thread(target=writer.write_loop, args=(stop,), name="report", daemon=True).start()
    _log(f"aggregating {SOURCE_LABEL} ConfigMaps into {args.namespace}/cluster-info-*")
    try:
        while True:
            try:
                _watch(rest, writer, stop)
            except (RestError, OSError, ssl.SSLError, ValueError, KeyError) as e:
                _log(f"watch ended: {e}; listing again")
                time.sleep(0.5)
    finally:
        stop.set()
        encoder.close()


@contextlib.contextmanager
def running(kubeconfig: Path, namespace: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run the ClusterD stand-in as a subprocess writing into `namespace` (its output in `log`) until the block
    ends; it has written its first report (``cluster-info-node-cm``) when the block starts.

    Raises:
        RuntimeError: it exited or wrote nothing within 30 s (the message holds its log's tail).
    """
    rest = rest_from_kubeconfig(kubeconfig)
    root = Path(__file__).resolve().parent.parent
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.clusterd", f"--kubeconfig={kubeconfig}", f"--namespace={namespace}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                rest.get(f"/api/v1/namespaces/{namespace}/configmaps/cluster-info-node-cm")
                break
            except RestError as e:
                if e.status != 404:
                    raise
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace").splitlines()[-10:]
                raise RuntimeError("the ClusterD stand-in wrote no report:\n" + "\n".join(tail))
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
