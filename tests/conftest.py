"""Shared pytest fixtures: the real testbed (etcd, kube-apiserver, controllers, kwok, Kafka) for integration
and end-to-end tests. Unit tests never touch it: the fixtures start it only when a test asks for one.

- `testbed` (session): a testbed started for this pytest run and stopped at its end. To reuse one started
  by hand (`python -m testbed up --dir D`), set FAULT_AGENT_TESTBED_DIR=D; it is then left running.
- `kube_client` (function): a kubernetes_asyncio ApiClient logged in as cluster admin.
- `namespace` (function): a fresh namespace, deleted after the test.
- `kafka_bootstrap` (session): the broker's host:port.

A component that cannot be reached fails the test; nothing here skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from testbed import agent_runner
from testbed.cluster import COMPONENTS, Testbed

_STARTED: list[Testbed] = []


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """The running testbed (see module docstring)."""
    reuse = os.environ.get("FAULT_AGENT_TESTBED_DIR")
    if reuse:
        tb = Testbed.attach(Path(reuse))
        _STARTED.append(tb)
        yield tb
        return
    tb = Testbed(tmp_path_factory.mktemp("testbed"))
    _STARTED.append(tb)
    tb.up()
    try:
        yield tb
    finally:
        tb.down()


@pytest.fixture(scope="session")
def kafka_bootstrap(testbed: Testbed) -> str:
    """host:port of the testbed's Kafka broker."""
    return testbed.kafka_bootstrap


@pytest_asyncio.fixture
async def kube_client(testbed: Testbed) -> AsyncIterator[client.ApiClient]:
    """An admin ApiClient for the testbed's apiserver."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(testbed.kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


@pytest_asyncio.fixture
async def namespace(kube_client: client.ApiClient) -> AsyncIterator[str]:
    """A fresh namespace named t-<random>, deleted (without waiting) after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(kube_client)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        await core.delete_namespace(name)


_AGENTS_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Note how many agent processes were started before this test (see pytest_runtest_makereport)."""
    item.stash[_AGENTS_BEFORE] = len(agent_runner.STARTED)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure of a test that used the testbed, name each component's log and show its last lines; and for
    each agent process the test started or that still runs (testbed.agent_runner.AgentProcess, a module's
    fixture), its warnings and last lines."""
    report = yield
    if report.failed:
        before = item.stash.get(_AGENTS_BEFORE, len(agent_runner.STARTED))
        agents = [a for i, a in enumerate(agent_runner.STARTED) if i >= before or a.running]
        if agents:
            report.sections.append(("agent logs", "\n".join(line for a in agents for line in a.report())))
    if report.failed and _STARTED and "testbed" in getattr(item, "fixturenames", ()):
        tb = _STARTED[-1]
        lines = [f"testbed folder: {tb.workdir}"]
        for name in COMPONENTS:
            comp = tb.components.get(name)
            if comp is None:
                continue
            state = "running" if comp.alive() else "NOT RUNNING"
            lines.append(f"--- {name} ({state}): {comp.log}")
            try:
                tail = comp.log.read_text(encoding="utf-8", errors="replace").splitlines()[-8:]
            except OSError:
                tail = ["(no log)"]
            lines += ["    " + t[:300] for t in tail]
        report.sections.append(("testbed logs", "\n".join(lines)))
    return report
