"""The end-to-end scenario fixture: fresh kwok nodes, the test's namespace, a Kafka reader and agent processes.

Isolation between tests (they share one testbed): each test labels its own uniquely named nodes with
``e2e.fault-agent.io/test=<tag>`` and its jobs select that label; its agent watches only the test's namespace
for pods and jobs, takes a Lease and a breaker ConfigMap of its own (in the test's namespace) and publishes with
``cluster_name=e2e-<tag>``, so the test reads only its own events (CloudEvents ``source``). Nodes and device
ConfigMaps are cluster-wide: other tests' nodes count as watched nodes, which the breaker thresholds account for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from helpers import AC, JS, RUNNING_RECORDERS, TEST_LABEL, VC, eventually, validate_event
from kubernetes_asyncio import client as k8s

from testbed.agent_runner import FAULTS_TOPIC, RECOVERIES_TOPIC, AgentProcess, EventReader, Received
from testbed.cluster import Testbed
from testbed.inject import Injector

_AGENTS = pytest.StashKey[list[AgentProcess]]()
TOPICS = (FAULTS_TOPIC, RECOVERIES_TOPIC)


@dataclass
class Scenario:
    """One end-to-end test's world. `tag` is unique per test and names its nodes, Lease and breaker ConfigMap."""

    testbed: Testbed
    api: k8s.ApiClient
    namespace: str
    tag: str
    workdir: Path
    injector: Injector
    reader: EventReader
    agents: list[AgentProcess]
    nodes: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """The CloudEvents ``source`` of this test's agent."""
        return f"/fault-agent/e2e-{self.tag}"

    async def add_nodes(self, n: int) -> list[str]:
        """Create `n` kwok nodes like the guide's (8 chips, healthy device ConfigMaps), labelled for this test,
        and wait until they are Ready."""
        names = [f"e2e-{self.tag}-{len(self.nodes) + i}" for i in range(n)]
        self.nodes += names
        self.injector.add_nodes(names)
        core = k8s.CoreV1Api(self.api)
        for name in names:
            await core.patch_node(name, {"metadata": {"labels": {TEST_LABEL: self.tag}}})

        async def ready() -> bool:
            for name in names:
                node = await core.read_node(name)
                if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                    return False
            return True

        await eventually(ready, what=f"kwok to make {n} nodes Ready")
        return names

    async def start_agent(
        self, name: str = "agent", *, standby: bool = False, args: tuple[str, ...] = (), **settings: str
    ) -> AgentProcess:
        """Start `fault-agent run` for this test and wait until it is ready and leads (`standby`: only until it
        is ready, another agent holding the Lease). `settings` are FAULT_AGENT_* variables without the prefix;
        they override the isolation defaults above. `args`: more `fault-agent run` arguments (``--record DIR``)."""
        env = {
            "CLUSTER_NAME": f"e2e-{self.tag}",
            "KUBE__NAMESPACES": json.dumps([self.namespace]),
            "LEADER__NAMESPACE": self.namespace,
            "LEADER__NAME": f"fault-agent-{self.tag}",
            "POLICY__BREAKER_CONFIGMAP": f"fault-agent-breaker-{self.tag}",
            # Only the breaker scenario wants the breaker to trip: elsewhere a fault left on another test's
            # node must not stop this test's agent.
            "POLICY__BREAKER_MIN_FAULTY_NODES": "1000",
            # These scenarios were written around the RestartJob Command (they count Commands); the default,
            # auto (the guide job restarted by deleting its pods), has scenarios of its own, which ask for it
            # (test_volcano_recovery.py::test_by_default_the_guides_job_is_restarted_by_pod_deletion_counted_once…).
            "POLICY__VOLCANO_RESTART": "command",
            **settings,
        }
        agent = AgentProcess(self.testbed, self.workdir, settings=env, name=f"{name}-{self.tag}", args=args)
        self.agents.append(agent)
        await asyncio.to_thread(agent.start)
        if standby:
            return agent

        async def leads() -> bool:  # /readyz says the caches are synced; acting also needs the Lease
            return agent.metric("fault_agent_leader") == 1

        await eventually(leads, timeout_s=20, what=f"agent {agent.name} to take its Lease")
        return agent

    def events(self, fragment: str, where: Callable[[dict[str, Any]], bool] = lambda e: True) -> list[dict[str, Any]]:
        """This test's events whose type contains `fragment` and that satisfy `where`, each validated against
        its JSON Schema."""
        out = []
        for r in self.reader.events:
            if r.event.get("source") != self.source or fragment not in r.type:
                continue
            event = validate_event(r)
            if where(event):
                out.append(event)
        return out

    async def wait_events(
        self,
        fragment: str,
        where: Callable[[dict[str, Any]], bool] = lambda e: True,
        *,
        count: int = 1,
        timeout_s: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Wait until `count` of this test's events match (see :meth:`events`); returns them all."""

        def match(r: Received) -> bool:
            return r.event.get("source") == self.source and fragment in r.type and where(r.event)

        await self.reader.wait_for(match, count=count, timeout_s=timeout_s, what=f"{count} x {fragment}")
        return self.events(fragment, where)


def for_job(uid: str) -> Callable[[dict[str, Any]], bool]:
    """Event filter: the event's ``data.job.uid`` is `uid`."""
    return lambda e: ((e.get("data") or {}).get("job") or {}).get("uid") == uid


async def _ensure_topics(bootstrap: str) -> None:
    """Create the agent's topics if missing (as the agent's create_topics would: 6 partitions, one replica), so
    the reader can subscribe before the first agent starts."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        missing = set(TOPICS) - set(await admin.list_topics())
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(t, num_partitions=6, replication_factor=1) for t in missing])
    finally:
        await admin.close()


@pytest_asyncio.fixture
async def scenario(
    request: pytest.FixtureRequest,
    testbed: Testbed,
    kube_client: k8s.ApiClient,
    namespace: str,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> AsyncIterator[Scenario]:
    """A fresh scenario; at the end its agents are stopped (SIGTERM) and its nodes deleted."""
    tag = uuid.uuid4().hex[:6]
    await _ensure_topics(kafka_bootstrap)
    reader = EventReader(kafka_bootstrap)
    await reader.start(from_beginning=True)  # events are told apart by their source, not by offsets
    agents: list[AgentProcess] = []
    request.node.stash[_AGENTS] = agents
    sc = Scenario(testbed, kube_client, namespace, tag, tmp_path, Injector(testbed.rest()), reader, agents)
    try:
        yield sc
    finally:
        for rec in list(RUNNING_RECORDERS):
            await rec.stop()
        for agent in agents:
            agent.stop(signal.SIGTERM)
        await reader.stop()
        await _clear_namespace(kube_client, namespace)
        sc.injector.delete_nodes(sc.nodes)


async def _clear_namespace(api: k8s.ApiClient, namespace: str) -> None:
    """Delete the test's jobs and pods (grace 0) and wait until the pods are gone, before its nodes go: pods left
    bound to deleted nodes stay Terminating until the pod garbage collector's 40 s, and Volcano's scheduler
    stumbles over their jobs meanwhile, slowing every later test."""
    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    for group, version, plural in (VC, AC, JS):
        await custom.delete_collection_namespaced_custom_object(group, version, namespace, plural)
    await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)

    async def gone() -> bool:
        return not (await core.list_namespaced_pod(namespace)).items

    await eventually(gone, timeout_s=30, what=f"the pods of {namespace} to be deleted")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, show the tail of each agent's log (JSON lines) and where the whole log is."""
    report = yield
    agents = item.stash.get(_AGENTS, [])
    if report.failed and agents:
        for agent in agents:
            report.sections.append((f"agent {agent.name} log ({agent.log})", agent.tail(30)))
    return report
