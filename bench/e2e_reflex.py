"""The reflex watcher: bench_e2e's third same-run baseline, run by it as a process of its own.

It is the least any watcher of the device-plugin ConfigMaps can do about a fault: it watches the ConfigMaps of
``kube-system`` and answers every write of a ``mindx-dl-deviceinfo-<node>`` ConfigMap, at once, with one create
of a RestartJob Command (the same kind, size and owner reference as the agent's) in a namespace of its own, for a
job that does not exist (Volcano's controller finds no job, deletes the Command and logs it; nothing restarts).
No parsing beyond the event's envelope, no decision, no durability, no other write: ``bench_e2e`` times its
Commands' ADDED events on the same watch clock as the agent's, so ``agent − reflex`` per fault is what the
agent's work adds, and ``reflex`` is the fault → action an agent could reach on this apiserver under this load.

With ``--delete-pods-in NAMESPACE`` it answers with a pod deletion instead of a Command, the agent's usual first
action (``policy.volcano_restart`` ``auto`` and ``delete-pods``): before it is ready it keeps one running pod per
device-plugin ConfigMap in that namespace (``reflex-<node>-<n>``, labelled with the node, bound to that node, which
kwok runs; it requests nothing and tolerates every taint), and answers a write of the node's ConfigMap with one
DELETE of that pod, grace 0 with its UID as precondition (the agent's request on a job's running pod: the apiserver
sets its deletionTimestamp, kwok removes it); the next pod for the node is created once the deletion was answered,
outside the timed path. Pods of an earlier run are deleted at the start, its own when it stops. ``bench_e2e``
times the deletion on the same pod watch as the agent's deletions. A pod that is not bound (no node) is deleted at
once instead, a path the apiserver showed ~40 ms later under bench_e2e's load than a running pod's deletionTimestamp
(session 24: request → seen 84.0 vs 45.9 ms p50).

With ``--topic``, it also answers every such write with one Kafka record on that topic of the testbed's broker
(sent right after the Command's request is on its way; the agent's producer settings: ``acks=all``, idempotence,
gzip, no linger; about the size of the agent's ``fault.detected``; keyed by the node, value
``{"node", "resourceVersion", ...}``), without an outbox: on a topic with ``LogAppendTime`` its records' timestamps
are the fault → Kafka a publisher could reach on this broker under this load.

    python bench/e2e_reflex.py --dir TESTBED --namespace bench-e2e-reflex [--topic bench.e2e.reflex]
        [--delete-pods-in bench-e2e] [--name reflex] [--path-cpu-ms 0] [--durable-dir DIR]

``--name`` (default ``reflex``) names what it writes: its Commands ``<name>-<resourceVersion>``, its pods
``<name>-<node>-<n>`` and the ``by`` field of its records. Two watchers of different names run side by side on one
testbed without touching each other's pods: ``bench_e2e --twin`` starts a second, identical one (``twin``), whose
answers less the first's, per fault, are the noise of the figure ``agent − reflex`` itself.

``--path-cpu-ms MS`` (default 0) makes it spend MS ms of its thread's CPU between reading a write and starting its
answers, as a watcher that parses and decides does: ``bench_e2e --twin-path-cpu-ms`` gives it to the twin, whose
figures are then the floor, on this machine at this moment, of a watcher with that much CPU on its way from the
fault to its answer (the agent's is in its ``fault stages`` lines: ``path_cpu_ms``).

``--durable-dir DIR`` makes it durable first, as the agent is: each answer's record (the Kafka record's value) is
appended to ``DIR/<name>.journal`` and fsync'd in a worker thread (the agent's outbox does both in one,
``asyncio.to_thread``) before its action's request goes out; its Kafka record goes out without waiting for the fsync
(the agent's ``fault.detected`` is handed to its producer while its fsync runs). ``bench_e2e --twin-durable`` gives
it to the twin: with ``--twin-path-cpu-ms`` the floor, on this machine at this moment, of a watcher that does what
the agent must (decide, persist before acting) and nothing more.

It prints ``ready`` on stdout once its watch is open; it runs until stopped (SIGTERM or SIGINT).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
from aiokafka import AIOKafkaProducer

from testbed.cluster import Testbed

NODE_LABEL = "bench.fault-agent.io/node"
DEVICEINFO = "mindx-dl-deviceinfo-"
DEFAULT_NAME = "reflex"


def command(namespace: str, node: str, resource_version: str, name: str = DEFAULT_NAME) -> dict[str, Any]:
    """A RestartJob Command of the agent's shape for the nonexistent job ``reflex-nojob``, labelled with `node`,
    named ``<name>-<resource_version>``."""
    owner = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "name": "reflex-nojob",
        "uid": str(uuid.uuid4()),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {
            "name": f"{name}-{resource_version}",
            "namespace": namespace,
            "labels": {NODE_LABEL: node},
            "ownerReferences": [owner],
        },
        "action": "RestartJob",
        "target": owner,
        "reason": "FaultAgentRestart",
        "message": "reflex baseline: " + "x" * 180,  # about the agent's message length
    }


def standing_pod(namespace: str, node: str, seq: int, name: str = DEFAULT_NAME) -> dict[str, Any]:
    """The `seq`-th pod of the reflex `name` for `node` (``<name>-<node>-<seq>``): bound to it (kwok runs it),
    requesting nothing, tolerating every taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-{node}-{seq}", "namespace": namespace, "labels": {NODE_LABEL: node}},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "idle", "image": "bench/reflex:none"}],
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def spend_cpu(ms: float) -> None:
    """Keep this thread busy until it used `ms` milliseconds of CPU (``time.thread_time``: time off the CPU does
    not count); nothing for 0."""
    if ms <= 0:
        return
    until = time.thread_time() + ms / 1000
    while time.thread_time() < until:
        pass


def append_durably(journal: BinaryIO, value: bytes) -> None:
    """Append `value` and a newline to `journal` and fsync it (blocking: run in a worker thread).

    Raises:
        OSError: the write or the fsync failed.
    """
    journal.write(value + b"\n")
    journal.flush()
    os.fsync(journal.fileno())


def record(node: str, resource_version: str, name: str = DEFAULT_NAME) -> bytes:
    """The Kafka record value of the reflex `name` answering a write of `node`'s ConfigMap at `resource_version`
    (~900 bytes)."""
    return json.dumps({"node": node, "resourceVersion": resource_version, "by": name, "padding": "x" * 810}).encode()


async def run(
    testbed: Testbed,
    namespace: str,
    topic: str | None,
    pods_namespace: str | None = None,
    name: str = DEFAULT_NAME,
    path_cpu_ms: float = 0.0,
    journal: BinaryIO | None = None,
) -> None:
    """Answer the device-plugin ConfigMaps' writes until cancelled (see the module docstring); `journal`: durable
    first, each answer's record appended to it and fsync'd before the action."""
    producer: AIOKafkaProducer | None = None
    if topic:
        producer = AIOKafkaProducer(
            bootstrap_servers=testbed.kafka_bootstrap, acks="all", enable_idempotence=True, compression_type="gzip",
            linger_ms=0,
        )  # fmt: skip
        await producer.start()
        await producer.partitions_for(topic)  # no metadata round trip inside the first send
    try:
        await _answer_writes(testbed, namespace, topic, producer, pods_namespace, name, path_cpu_ms, journal)
    finally:
        if producer is not None:
            await producer.stop()


async def _answer_writes(
    testbed: Testbed,
    namespace: str,
    topic: str | None,
    producer: AIOKafkaProducer | None,
    pods_namespace: str | None,
    name: str,
    path_cpu_ms: float = 0.0,
    journal: BinaryIO | None = None,
) -> None:
    rest = testbed.rest()
    async with aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {rest.token}"},
        connector=aiohttp.TCPConnector(ssl=rest.ctx or ssl.create_default_context()),
        timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
    ) as session:
        async with session.post(f"{rest.base}/api/v1/namespaces", json={"metadata": {"name": namespace}}) as resp:
            if resp.status not in (201, 409):
                raise SystemExit(f"reflex: cannot create namespace {namespace}: HTTP {resp.status}")
        commands = f"{rest.base}/apis/bus.volcano.sh/v1alpha1/namespaces/{namespace}/commands"
        pending: set[asyncio.Task[None]] = set()
        pods = _Pods(session, rest.base, pods_namespace, name) if pods_namespace else None
        path = f"{rest.base}/api/v1/namespaces/kube-system/configmaps"
        rv = ""
        if pods is not None:  # the list names the nodes; the watch starts from it
            async with session.get(path) as resp:
                resp.raise_for_status()
                listing = await resp.json()
            rv = str(listing["metadata"]["resourceVersion"])
            cms = [str(i["metadata"]["name"]) for i in listing["items"]]
            await pods.keep([n.removeprefix(DEVICEINFO) for n in cms if n.startswith(DEVICEINFO)])

        async def answer(node: str, resource_version: str, synced: asyncio.Future[None] | None) -> None:
            if synced is not None:  # durable first: its record is on disk before the action
                await synced
            if pods is not None:
                await pods.delete(node)
                return
            async with session.post(commands, json=command(namespace, node, resource_version, name)) as resp:
                await resp.read()
                if resp.status != 201:
                    print(f"reflex: Command for {node} not created: HTTP {resp.status}", file=sys.stderr, flush=True)

        async def publish(node: str, resource_version: str) -> None:
            assert producer is not None
            assert topic is not None
            try:
                await producer.send_and_wait(topic, record(node, resource_version, name), key=node.encode())
            except Exception as e:  # reported; the benchmark finds the record missing
                print(f"reflex: record for {node} not sent: {e!r}", file=sys.stderr, flush=True)

        try:
            while True:
                if not rv:  # first, and after the watch said its resourceVersion is too old (an ERROR event)
                    async with session.get(path) as resp:
                        resp.raise_for_status()
                        rv = str((await resp.json())["metadata"]["resourceVersion"])
                query = f"?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}"
                async with session.get(path + query) as resp:
                    resp.raise_for_status()
                    print("ready", flush=True)
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            rv = ""
                            break
                        meta = event.get("object", {}).get("metadata", {})
                        rv = str(meta.get("resourceVersion", rv))
                        written = str(meta.get("name", ""))
                        if event.get("type") == "MODIFIED" and written.startswith(DEVICEINFO):
                            node = written.removeprefix(DEVICEINFO)
                            spend_cpu(path_cpu_ms)
                            synced = None
                            if journal is not None:
                                value = record(node, rv, name)
                                synced = asyncio.ensure_future(asyncio.to_thread(append_durably, journal, value))
                            tasks = [asyncio.create_task(answer(node, rv, synced))]  # first: its request goes first
                            if producer is not None:
                                tasks.append(asyncio.create_task(publish(node, rv)))
                            for task in tasks:
                                pending.add(task)
                                task.add_done_callback(pending.discard)
        finally:
            if pods is not None:  # stopped (SIGTERM): its pods go, so that later benchmarks on the testbed see none
                with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                    await asyncio.wait_for(asyncio.shield(pods.remove()), 10)


class _Pods:
    """The running pods of the reflex `name`, one per node, in `namespace` (see the module docstring)."""

    def __init__(self, session: aiohttp.ClientSession, base: str, namespace: str, name: str) -> None:
        self.session = session
        self.name = name
        self.url = f"{base}/api/v1/namespaces/{namespace}/pods"
        self.namespace = namespace
        self.current: dict[str, tuple[str, str]] = {}  # node -> (pod name, UID)
        self.ready: dict[str, asyncio.Event] = {}
        self.seq = int(time.time())  # names never reused while an earlier pod of the node is still going

    async def keep(self, nodes: list[str]) -> None:
        """Delete an earlier run's pods, then create one pod per node of `nodes`."""
        await self.remove()
        await asyncio.gather(*(self._create(node) for node in nodes))

    async def remove(self) -> None:
        """Delete every pod of this reflex (by its name) in the namespace (grace 0), this run's or an earlier one's;
        another reflex's pods stay."""
        async with self.session.get(self.url, params={"labelSelector": NODE_LABEL}) as resp:
            resp.raise_for_status()
            names = [str(i["metadata"]["name"]) for i in (await resp.json())["items"]]
        names = [n for n in names if n.startswith(f"{self.name}-")]
        await asyncio.gather(*(self._delete_now(name) for name in names))

    async def _delete_now(self, name: str) -> None:
        async with self.session.delete(f"{self.url}/{name}", json={"gracePeriodSeconds": 0}) as resp:
            await resp.read()

    async def _create(self, node: str) -> None:
        ready = self.ready.setdefault(node, asyncio.Event())
        self.seq += 1
        async with self.session.post(self.url, json=standing_pod(self.namespace, node, self.seq, self.name)) as resp:
            body = await resp.json()
        if resp.status != 201:
            print(f"reflex: pod for {node} not created: HTTP {resp.status}", file=sys.stderr, flush=True)
            return
        self.current[node] = (str(body["metadata"]["name"]), str(body["metadata"]["uid"]))
        ready.set()

    async def delete(self, node: str) -> None:
        """Delete `node`'s pod as the agent deletes a job's pod (grace 0, UID precondition), then create the next."""
        ready = self.ready.get(node)
        if ready is None:
            print(f"reflex: no pod for {node} (its ConfigMap came after the start)", file=sys.stderr, flush=True)
            return
        await ready.wait()  # the next pod still being created after the last write of this node
        ready.clear()
        name, uid = self.current.pop(node)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        async with self.session.delete(f"{self.url}/{name}", json=options) as resp:
            await resp.read()
            if resp.status != 200:
                print(f"reflex: pod {name} not deleted: HTTP {resp.status}", file=sys.stderr, flush=True)
        await self._create(node)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="the running testbed's folder")
    parser.add_argument("--namespace", required=True, help="where its Commands go (created when missing)")
    parser.add_argument("--topic", help="also answer each write with one Kafka record on this (existing) topic")
    parser.add_argument(
        "--delete-pods-in", metavar="NAMESPACE",
        help="answer with a deletion of a running pod of its own in this namespace instead of a Command",
    )  # fmt: skip
    parser.add_argument(
        "--name", default=DEFAULT_NAME,
        help="names its Commands, pods and records (default reflex): a second watcher runs beside the first",
    )  # fmt: skip
    parser.add_argument(
        "--path-cpu-ms", type=float, default=0.0, metavar="MS",
        help="spend MS ms of CPU between reading a write and answering it (a watcher that decides; default 0)",
    )  # fmt: skip
    parser.add_argument(
        "--durable-dir", type=Path, metavar="DIR",
        help="durable first: append each answer's record to DIR/<name>.journal and fsync it before the action",
    )  # fmt: skip
    args = parser.parse_args()
    if args.path_cpu_ms < 0:
        parser.error(f"--path-cpu-ms must be 0 or more, not {args.path_cpu_ms:g}")
    testbed = Testbed.attach(Path(args.dir))
    journal = None
    if args.durable_dir is not None:
        args.durable_dir.mkdir(parents=True, exist_ok=True)
        journal = (args.durable_dir / f"{args.name}.journal").open("ab")

    async def until_stopped() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        answering = run(testbed, args.namespace, args.topic, args.delete_pods_in, args.name, args.path_cpu_ms, journal)
        body = asyncio.create_task(answering)
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({body, stopper}, return_when=asyncio.FIRST_COMPLETED)
        body.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await body  # an error of its own is raised here
        stopper.cancel()

    try:
        asyncio.run(until_stopped())
    finally:
        if journal is not None:
            journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
