"""Benchmark `initial list`: seconds from start to ready for a pod watcher over 20k pods on the testbed.

Needs a running testbed (``python -m testbed up --dir D``; pass ``--kubeconfig D/kubeconfig``). Creates
--pods realistic pods (bench_ingest.make_pod, without status; kwok has no node for them) in a fresh
namespace, then times a fresh Watcher's paginated list into a ClusterState until the state is ready, and,
in the same run, the same list read through the generated client (``list_namespaced_pod``, models built).

Run: ``python bench/bench_initial_list.py --kubeconfig D/kubeconfig [--pods 20000] [--write]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from bench_ingest import create_pods, update_row
from kubernetes_asyncio import client

from agent.core.cluster import PodRecord
from agent.kube.client import ApiTransport, new_api_client
from agent.kube.watch import Resource, Watcher
from agent.sources.pods import PodConverter
from agent.sources.state import ClusterState


async def _count_pods(core: client.CoreV1Api, ns: str) -> int:
    """Pods in `ns` now, by a metadata-only paginated list."""
    n, token = 0, None
    while True:
        result = await core.list_namespaced_pod(ns, limit=5000, _continue=token)
        n += len(result.items)
        token = result.metadata._continue
        if not token:
            return n


async def run(kubeconfig: str, pods: int, page: int) -> tuple[float, float]:
    """Create the pods, then return (engine seconds to ready, generated-client seconds)."""
    api = await new_api_client(kubeconfig)
    core = client.CoreV1Api(api)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    await core.create_namespace({"metadata": {"name": ns}})
    try:
        started = time.perf_counter()
        await create_pods(core, ns, pods)
        print(f"created {pods} pods in {time.perf_counter() - started:.1f} s")

        state = ClusterState()
        res = Resource("pods", "Pod", "", "v1", "pods", ns)
        watcher: Watcher[PodRecord] = Watcher(
            ApiTransport(api), res, PodConverter(), state.store("pods"), state.apply, page_size=page
        )
        state.expect(res.watcher_id)
        started = time.perf_counter()
        await watcher.relist()
        engine = time.perf_counter() - started
        assert state.ready
        # The pods are bound to nodes that do not exist, so the controller-manager's PodGC deletes some once they
        # are 40 s old (on a loaded machine creating 20,000 takes minutes): the engine must hold every pod the
        # apiserver still has, counted right after by a plain list.
        left = await _count_pods(core, ns)
        assert len(state.pods) == left, f"engine listed {len(state.pods)} pods, the apiserver has {left}"
        if left != pods:
            print(f"{pods - left} of {pods} pods were deleted by PodGC before the list")

        started = time.perf_counter()
        token = None
        n = 0
        while True:
            result = await core.list_namespaced_pod(ns, limit=page, _continue=token)
            n += len(result.items)
            token = result.metadata._continue
            if not token:
                break
        models = time.perf_counter() - started
        assert 0 < n <= left  # the same pods, less any PodGC deleted meanwhile
        return engine, models
    finally:
        await core.delete_namespace(ns)
        await api.close()


def main() -> int:
    """Run; print; with --write update the `initial list` row of bench/RESULTS.md."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--page", type=int, default=500)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    engine, models = asyncio.run(run(args.kubeconfig, args.pods, args.page))
    print(f"engine list → ready: {engine:.2f} s; generated client list with models: {models:.2f} s")
    if args.write:
        update_row(
            "initial list",
            f"{engine:.2f} s to ready ({args.pods:,} pods, pages of {args.page}, testbed apiserver)",
            "seconds to ready (reported)",
            f"generated client list_namespaced_pod with models {models:.2f} s",
            f"python bench/bench_initial_list.py --kubeconfig D/kubeconfig --pods {args.pods} --write",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
