"""The container image as a cluster runs it: the image `make image` built (testbed/image.py), run with buildah.

- `fault-agent --help` and `settings --defaults` work inside the image, the latter printing exactly what the
  source tree prints.
- The image holds the agent's virtualenv with the versions constraints.txt pins, and no testbed package, no pip,
  no build secret; it runs as UID 10001.
- The image's own command (ENTRYPOINT + CMD, `fault-agent run`) reaches /readyz 200 and takes its Lease on the
  testbed's apiserver with **in-cluster configuration only**: a ServiceAccount token (TokenRequest API) and the
  cluster CA mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT set,
  no kubeconfig anywhere. The ServiceAccount is bound to deploy/'s ClusterRole and Role rules (copied under this
  test's names). The agent watches only the test's namespace and runs in dry-run mode, so it never acts on other
  tests' jobs; SIGTERM stops it cleanly (exit code 0).

The image is built by `make image` before the tests (`make test`); run alone, the `image` fixture builds it when
the store has none of the current source (a few minutes).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s

from testbed import image as image_tool
from testbed.cluster import Testbed, free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# The agent reads the standard /var/run/secrets/kubernetes.io/serviceaccount (kubernetes_asyncio's in-cluster
# loader). In a Debian image /var/run is a symlink to /run, which a container runtime resolves inside the image
# before it mounts; buildah's chroot isolation does not, so the volume goes to the resolved path.
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_MOUNT = "/run/secrets/kubernetes.io/serviceaccount"
RBAC = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def image() -> str:
    """The image of the current source tree (built now if the store lacks it)."""
    return image_tool.ensure_image()


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[image_tool.Container]:
    """A working container of the image (vfs copies the whole image for each: one for the module), removed
    afterwards."""
    with image_tool.Container(image) as ctr:
        yield ctr


def _inspect(image: str) -> dict[str, Any]:
    out = image_tool.buildah("inspect", "--type", "image", image).stdout
    config: dict[str, Any] = json.loads(out)["OCIv1"]["config"]
    return config


def test_help_and_default_settings_match_the_source(container: image_tool.Container) -> None:
    helped = container.run(["fault-agent", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: fault-agent"), helped.stdout[:200]
    for command in ("run", "settings"):
        assert re.search(rf"\b{command}\b", helped.stdout), command
    inside = container.run(["fault-agent", "settings", "--defaults"])
    assert inside.returncode == 0, inside.stderr
    here = subprocess.run(
        [sys.executable, "-m", "agent", "settings", "--defaults"], capture_output=True, text=True, check=True
    )
    assert inside.stdout == here.stdout
    assert "cluster_name:" in inside.stdout


def _pins() -> dict[str, str]:
    """constraints.txt as {normalised name: version}."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line)
        if m:
            pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return pins


def test_image_holds_the_pinned_agent_and_nothing_else(image: str, container: image_tool.Container) -> None:
    config = _inspect(image)
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["fault-agent"]
    assert config["Cmd"] == ["run"]
    assert container.run(["id", "-u"]).stdout.strip() == "10001"
    listed = container.run(
        [
            "python",
            "-c",
            "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))",
        ]
    )
    assert listed.returncode == 0, listed.stderr
    installed = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in json.loads(listed.stdout).items()}
    assert installed.pop("fault-agent") == importlib.metadata.version("fault-agent")
    pins = _pins()
    assert {name: (v, pins.get(name)) for name, v in installed.items() if pins.get(name) != v} == {}
    for name in ("pip", "setuptools", "pytest", "mypy", "ruff", "uv"):
        assert name not in installed, name
    for module in ("testbed", "tests", "pip"):
        probe = container.run(["python", "-c", f"import {module}"])
        assert probe.returncode == 1, f"{module} importable in the image"
        assert f"No module named '{module}'" in probe.stderr
    found = container.run(["sh", "-c", "ls -d /run/secrets/pip-ca /src /wheels /root/.cache/pip 2>/dev/null; true"])
    assert found.stdout.strip() == "", f"build leftovers in the image: {found.stdout}"
    size = container.run(["du", "-sm", "/opt/fault-agent"])
    assert int(size.stdout.split()[0]) < 130, f"the virtualenv grew to {size.stdout.split()[0]} MB"


def _deploy_rules() -> dict[str, list[dict[str, Any]]]:
    """The rules of deploy/'s ClusterRole and Role, as `kubectl apply -k deploy/` creates them (the renderer of
    tests/tools/test_deploy.py)."""
    path = REPO / "tests" / "tools" / "test_deploy.py"
    spec = importlib.util.spec_from_file_location("_deploy_render_image", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    objs = module.render_base()
    # the agent's own ClusterRole and its Role in its namespace (deploy/role.yaml), not the bookkeeping Roles in
    # volcano-system and mindx-dl (deploy/bookkeeping-rbac.yaml), which this test has no use for
    return {
        o["kind"]: o["rules"]
        for o in objs
        if o["kind"] in {"ClusterRole", "Role"} and o["metadata"]["name"] == "fault-agent"
    }


@pytest_asyncio.fixture
async def service_account(
    kube_client: k8s.ApiClient, namespace: str, testbed: Testbed, tmp_path: Path
) -> AsyncIterator[Path]:
    """ServiceAccount `fault-agent` in the test's namespace with deploy/'s rules; yields a folder laid out like
    the kubelet's projected service-account volume (token, ca.crt, namespace). The cluster-scoped role and
    binding are deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    rules = _deploy_rules()
    rbac = k8s.RbacAuthorizationV1Api(kube_client)
    core = k8s.CoreV1Api(kube_client)
    name = f"fault-agent-image-{tag}"
    subject = [{"kind": "ServiceAccount", "name": "fault-agent", "namespace": namespace}]
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": "fault-agent"}})
    await rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules["ClusterRole"]})
    try:
        await rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
                "subjects": subject,
            }
        )
        await rbac.create_namespaced_role(namespace, {"metadata": {"name": "fault-agent"}, "rules": rules["Role"]})
        await rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "fault-agent"},
                "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "fault-agent"},
                "subjects": subject,
            },
        )
        request = k8s.AuthenticationV1TokenRequest(spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
        token = await core.create_namespaced_service_account_token("fault-agent", namespace, request)
        sa = tmp_path / "serviceaccount"
        sa.mkdir(mode=0o755)
        (sa / "token").write_text(token.status.token)
        (sa / "ca.crt").write_bytes(testbed.ca_file.read_bytes())
        (sa / "namespace").write_text(namespace)
        for f in sa.iterdir():
            f.chmod(0o644)  # the kubelet's default mode; the agent runs as UID 10001
        yield sa
    finally:
        await rbac.delete_cluster_role_binding(name)
        await rbac.delete_cluster_role(name)


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _leader(url: str) -> float:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    m = re.search(r"^fault_agent_leader(?:\{[^}]*\})? (\S+)$", text, flags=re.MULTILINE)
    return float(m.group(1)) if m else 0.0


async def test_agent_runs_in_the_image_with_in_cluster_config(
    image: str,
    container: image_tool.Container,
    service_account: Path,
    testbed: Testbed,
    namespace: str,
    kube_client: k8s.ApiClient,
    tmp_path: Path,
) -> None:
    config = _inspect(image)
    seen = container.run(["cat", f"{SA_DIR}/namespace"], volumes={service_account: SA_MOUNT})
    assert seen.stdout == namespace, seen.stderr
    port = free_port()
    tag = uuid.uuid4().hex[:6]
    env = {
        # exactly what the kubelet sets for a pod: the apiserver's address and port, nothing else about it
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": testbed.apiserver_url.rsplit(":", 1)[1],
        "HOSTNAME": f"image-{tag}",
        "FAULT_AGENT_CLUSTER_NAME": f"image-{tag}",
        "FAULT_AGENT_KUBE__NAMESPACES": json.dumps([namespace]),
        "FAULT_AGENT_LEADER__NAMESPACE": namespace,
        "FAULT_AGENT_POLICY__DRY_RUN": "true",
        "FAULT_AGENT_POLICY__BREAKER_CONFIGMAP": f"fault-agent-breaker-{tag}",
        "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": testbed.kafka_bootstrap,
        "FAULT_AGENT_KAFKA__CREATE_TOPICS": "true",
        "FAULT_AGENT_KAFKA__TOPIC_REPLICATION_FACTOR": "1",
        "FAULT_AGENT_SERVER__BIND_ADDRESS": "127.0.0.1",
        "FAULT_AGENT_SERVER__PORT": str(port),
    }
    log = tmp_path / "agent.log"
    url = f"http://127.0.0.1:{port}"
    proc = container.start(
        [*config["Entrypoint"], *config["Cmd"]], log=log, env=env, volumes={service_account: SA_MOUNT}
    )

    def tail() -> str:
        return "\n".join(log.read_text(errors="replace").splitlines()[-30:])

    try:
        deadline = time.monotonic() + 120
        while _status(url + "/readyz") != 200 or _leader(url) != 1:
            if proc.poll() is not None:
                pytest.fail(f"the agent in the image exited with {proc.returncode}:\n{tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"the agent in the image was not ready and leading within 120 s:\n{tail()}")
            await asyncio.sleep(0.5)
        lease = await k8s.CoordinationV1Api(kube_client).read_namespaced_lease("fault-agent-leader", namespace)
        assert lease.spec.holder_identity.startswith(f"image-{tag}")
        logged = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        assert logged, f"no JSON log lines (the image sets FAULT_AGENT_LOG__FORMAT=json):\n{tail()}"
        # RBAC denials surface as a logged HTTP status 403 or an apiserver message saying "forbidden"
        forbidden = [
            e
            for e in logged
            if e.get("status") == 403 or any("forbidden" in str(v).lower() for v in e.values() if isinstance(v, str))
        ]
        assert forbidden == [], forbidden
    finally:
        if proc.poll() is None:
            image_tool.Container.signal_command(proc, signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(timeout=10)
    assert code == 0, f"exit code {code} after SIGTERM:\n{tail()}"
