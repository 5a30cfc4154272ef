"""Run the testbed: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, Volcano, JobSet's
controller manager and a Kafka broker.

All on loopback with free ports, so two testbeds can run at once. The apiserver runs with RBAC authorization,
TLS from a CA made here with openssl, and an admin bearer token (group ``system:masters``) written into
``kubeconfig``. Each component is a child process in its own session with its log in ``logs/<name>.log``.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from testbed import ascend_operator, build, versions
from testbed.rest import Rest, RestError
from testbed.tls import KafkaPki, PkiError, make_kafka_pki

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "vc-controller-manager",
    "vc-scheduler",
    "npu-plugin",
    "ascend-operator",
    "jobset-manager",
    "kafka",
)
MANIFESTS = Path(__file__).with_name("manifests")
KWOK_STAGES = Path(__file__).with_name("kwok") / "stages.yaml"
KWOK_USER = "testbed-kwok"
"""The user kwok's requests carry (it impersonates it with the admin token): see manifests/kwok-deletes.yaml."""
KWOK_OFF = "testbed.fault-agent.io/kwok=off"
"""A pod with this label is left alone by kwok (its --disregard-status-with-label-selector)."""


class TestbedError(RuntimeError):
    """A component could not be started or did not become healthy. The message names it and its log."""

    __test__ = False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


VOLCANO_LOG_LEVEL_ENV = "FAULT_AGENT_TESTBED_VOLCANO_V"
"""Environment variable: the klog level (``-v``) of Volcano's vc-controller-manager when a testbed starts it (default
2). At 3 it logs each request it handles, each ``killJob`` and the pods it marks out of sync, which
bench/volcano_kills.py reads (a restart's kill that left a pod of the old version behind: bench/RESULTS.md, "a
restart by deletion Volcano did not count"); a digit, else the default."""


VC_SCHEDULER_LOG_LEVEL_ENV = "FAULT_AGENT_TESTBED_VC_SCHEDULER_V"
"""Environment variable: the klog level (``-v``) of Volcano's vc-scheduler when a testbed starts it (default 2). At
4 it logs each session's enqueue verdicts (overcommit's "Resource in cluster is overused, reject job", proportion's
queue checks) and each task's predicate failures, which is what says why a PodGroup stays Pending; a digit, else
the default."""


def volcano_log_level(env: str = VOLCANO_LOG_LEVEL_ENV) -> str:
    """The ``-v`` value of the Volcano component whose knob is the environment variable `env` (default: the
    vc-controller-manager's, $FAULT_AGENT_TESTBED_VOLCANO_V; $FAULT_AGENT_TESTBED_VC_SCHEDULER_V for the
    vc-scheduler): its value when it is one digit, else "2"."""
    value = os.environ.get(env, "")
    return value if len(value) == 1 and value.isdigit() else "2"


VOLCANO_CONTROLLER_PROFILES: dict[str, tuple[str, ...]] = {
    # Volcano v1.14's own defaults (cmd/controller-manager/app/options/options.go: kube-api-qps 50, burst 100,
    # 3 job workers): what a cluster that installs Volcano from its own chart runs
    "volcano": (),
    # the arguments MindCluster ships for the controller (component/ascend-for-volcano/build/volcano-v1.15.0.yaml in
    # Ascend/mind-cluster, commit 22bb3d98; its v1.12.0 manifest gives the same but names --worker-threads twice, 6
    # then 3, and the last wins): many more client requests per second and twice the job workers, so a RestartJob
    # Command waits less in the controller's queue
    "mindcluster": (
        "--kube-api-qps=800",
        "--kube-api-burst=800",
        "--worker-threads=6",
        "--worker-threads-for-gc=5",
        "--worker-threads-for-podgroup=5",
    ),
}
"""Extra arguments of Volcano's controller-manager, by profile (:class:`Testbed` ``volcano_controller``)."""

_APISERVER_CLIENTS = ("kube-controller-manager", "kube-scheduler", "kwok", "vc-controller-manager", "vc-scheduler")
"""Components restarted with the kube-apiserver (see :meth:`Testbed.start`)."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphans if the test runner dies


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # set when reattached from a state file (no Popen)
    log_offset: int = 0  # size of the log when this run started: health checks read only what follows

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid is not None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            return True
        return False

    def current_pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid
        return self.pid


@dataclass
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    kcm: int
    scheduler: int
    kwok: int
    kafka: int
    kafka_controller: int
    vc_controller: int
    vc_controller_healthz: int
    vc_scheduler: int
    vc_scheduler_healthz: int
    # Kafka's TLS listener (mutual TLS); 0 in the state of a testbed started before it had one
    kafka_tls: int = 0
    # JobSet's controller manager: its webhook server and health probe; 0 in the state of an older testbed
    jobset_webhook: int = 0
    jobset_health: int = 0

    @staticmethod
    def pick() -> Ports:
        chosen: set[int] = set()
        while len(chosen) < len(fields(Ports)):
            chosen.add(free_port())
        return Ports(*sorted(chosen))


class Testbed:
    """One running testbed.

    Use :meth:`up` (or ``python -m testbed up``) and :meth:`down`; tests restart single components with
    :meth:`kill`, :meth:`start`, :meth:`pause` and :meth:`resume`.

    Attributes:
        workdir: holds certificates, data dirs, ``kubeconfig``, ``state.json`` and ``logs/``.
        kubeconfig: admin kubeconfig path.
        kafka_bootstrap: ``127.0.0.1:<port>``, the PLAINTEXT listener.
        kafka_tls_bootstrap: ``127.0.0.1:<port>``, the TLS listener: the broker's certificate is signed by
            ``kafka_pki.ca_cert`` and it requires a client certificate signed by the same CA (``kafka_pki.client_cert``
            and ``client_key``; made with openssl at the first start, testbed/tls.py).
        apiserver_url, etcd_url: base URLs.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        workdir: Path,
        ports: Ports | None = None,
        *,
        die_with_parent: bool = True,
        priority_and_fairness: bool = False,
        max_requests_inflight: int | None = None,
        volcano_controller: str = "volcano",
    ) -> None:
        if volcano_controller not in VOLCANO_CONTROLLER_PROFILES:
            raise TestbedError(
                f"unknown Volcano controller profile {volcano_controller!r}: one of "
                + ", ".join(sorted(VOLCANO_CONTROLLER_PROFILES))
            )
        self.workdir = workdir.resolve()
        # how Volcano's controller-manager runs: Volcano's defaults, or as MindCluster's manifests run it
        # (VOLCANO_CONTROLLER_PROFILES); the suite runs the defaults, bench_e2e can compare the two
        self.volcano_controller = volcano_controller
        # API Priority and Fairness in kube-apiserver: off by default (the suite's timings assume no queueing);
        # `max_requests_inflight` (read-only seats; mutating get half) shrinks the server's concurrency so a
        # benchmark can make priority levels queue on a 2-core machine
        self.priority_and_fairness = priority_and_fairness
        self.max_requests_inflight = max_requests_inflight
        self.logs_dir = self.workdir / "logs"
        self.ports = ports or Ports.pick()
        self.die_with_parent = die_with_parent
        self.token = secrets.token_hex(16)
        self.components: dict[str, Component] = {}

    # ----- addresses ---------------------------------------------------------------------------------------
    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd}"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports.kafka}"

    @property
    def kafka_tls_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports.kafka_tls}"

    @property
    def kafka_pki(self) -> KafkaPki:
        return KafkaPki(self.workdir / "kafka-pki")

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def kwok_kubeconfig(self) -> Path:
        """kwok's kubeconfig: the admin token, impersonating user ``testbed-kwok`` (still ``system:masters``), so
        testbed/manifests/kwok-deletes.yaml can tell kwok's pod deletions from everyone else's."""
        return self.workdir / "kwok.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    def rest(self) -> Rest:
        """A small synchronous admin client for set-up and health checks."""
        return Rest(self.apiserver_url, self.token, self.ca_file)

    # ----- lifecycle ---------------------------------------------------------------------------------------
    def up(self, *, timeout_s: float = 120.0) -> None:
        """Build what is missing, then start every component and wait until each is healthy.

        Raises:
            build.BuildError: a build step failed (names the step and its log).
            TestbedError: a port is taken or a component is not healthy within its deadline.
        """
        started = time.monotonic()
        bins = build.build_all()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for name, port in vars(self.ports).items():
            if _port_taken(port):
                raise TestbedError(f"port {port} for {name} is already taken on 127.0.0.1")
        self._pki()
        try:
            make_kafka_pki(self.kafka_pki.directory)
        except PkiError as e:
            raise TestbedError(str(e)) from e
        self._kubeconfig()
        self._define(bins)
        self._save_state()
        try:
            self._launch("kafka")
            self._launch("etcd")
            self._wait("etcd", self._etcd_healthy, timeout_s)
            self._launch("kube-apiserver")
            self._wait("kube-apiserver", self._apiserver_ready, timeout_s)
            self._install_manifests(bins["prometheus-operator"], bins["jobset"] / build.JOBSET_CRD)
            later = (
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
                "vc-controller-manager",
                "vc-scheduler",
                "npu-plugin",
                "ascend-operator",
                "jobset-manager",
            )
            for name in later:
                self._launch(name)
            self._wait("kafka", self._kafka_ready, timeout_s)
            self._wait("vc-scheduler", self._volcano_queue_exists, timeout_s)
            for name in later:
                self._wait(name, lambda: True, 5)
            self._wait("kube-controller-manager", self._default_sa_exists, timeout_s)
            self._wait("jobset-manager", self._jobset_ready, timeout_s)
            self._register_jobset_webhooks()
        except BaseException:
            self.down()
            raise
        print(f"[testbed] up in {time.monotonic() - started:.1f} s: {self.workdir}", file=sys.stderr, flush=True)

    def down(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL after 10 s). Safe to call twice."""
        for name in reversed(COMPONENTS):
            comp = self.components.get(name)
            if comp is not None:
                self._terminate(comp)

    # ----- per-component control (used by tests) -----------------------------------------------------------
    def _launch(self, name: str) -> None:
        """(Re)start one component's process with the same ports and data directory; does not wait."""
        comp = self.components[name]
        if comp.alive():
            return
        comp.log.parent.mkdir(parents=True, exist_ok=True)
        comp.log_offset = comp.log.stat().st_size if comp.log.exists() else 0
        with comp.log.open("ab") as out:
            out.write(f"\n==== start {time.strftime('%H:%M:%S')}: {' '.join(comp.argv)}\n".encode())
            out.flush()
            comp.proc = subprocess.Popen(
                comp.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **comp.env},
                cwd=self.workdir,
                preexec_fn=_die_with_parent if self.die_with_parent else os.setsid,
            )
        comp.pid = comp.proc.pid
        self._save_state()

    def kill(self, name: str) -> None:
        """SIGKILL one component and wait for it to be gone."""
        comp = self.components[name]
        pid = comp.current_pid()
        if pid is None or not comp.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self._reap(comp, 10)

    def start(self, name: str, *, timeout_s: float = 120.0) -> None:
        """(Re)start one component (after :meth:`kill`) with the same ports and data, and wait until healthy.
        Restarting the kube-apiserver also restarts the controllers that watch it (``_APISERVER_CLIENTS``).

        Raises:
            TestbedError: it exits or is not healthy within `timeout_s`.
        """
        self._launch(name)
        checks = {"etcd": self._etcd_healthy, "kube-apiserver": self._apiserver_ready, "kafka": self._kafka_ready}
        self._wait(name, checks.get(name, lambda: True), timeout_s)
        if name == "kube-apiserver":
            # The controllers' informers back off for minutes after their apiserver went away (seen: vc-scheduler's
            # PodGroup cache stale for 2 min; kube-controller-manager creating no ServiceAccount in new namespaces
            # for as long, so no pod could be created there). A real cluster lives with that; a test run cannot,
            # so the controllers start afresh once the custom resources are served again.
            self._wait("kube-apiserver", self._volcano_queue_exists, timeout_s)
            for dependent in _APISERVER_CLIENTS:
                if self.components[dependent].alive():
                    self.kill(dependent)
                self._launch(dependent)
            for dependent in _APISERVER_CLIENTS:
                self._wait(dependent, lambda: True, 5)

    def pause(self, name: str) -> None:
        """SIGSTOP one component (its sockets stay open but it answers nothing)."""
        pid = self.components[name].current_pid()
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT a paused component."""
        pid = self.components[name].current_pid()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (watches from older resourceVersions then get 410 Gone).

        Returns the revision compacted at. Raises TestbedError when etcdctl fails.
        """
        etcdctl = str(build.etcd_bins() / "etcdctl")
        out = subprocess.run(
            [etcdctl, f"--endpoints={self.etcd_url}", "endpoint", "status", "-w", "json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0:
            raise TestbedError(f"etcdctl endpoint status failed: {out.stderr.strip()}")
        rev = int(json.loads(out.stdout)[0]["Status"]["header"]["revision"])
        res = subprocess.run(
            [etcdctl, f"--endpoints={self.etcd_url}", "compact", str(rev), "--physical"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if res.returncode != 0:
            raise TestbedError(f"etcdctl compact {rev} failed: {res.stderr.strip()}")
        return rev

    def status(self) -> dict[str, str]:
        """name → "running"/"stopped" for every component."""
        return {name: ("running" if c.alive() else "stopped") for name, c in self.components.items()}

    def env(self) -> dict[str, str]:
        """Environment for people and the agent: KUBECONFIG, Kafka bootstrap, settings overrides."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            # the TLS listener and the files a client needs for it (not used by default: the agent speaks PLAINTEXT)
            "KAFKA_TLS_BOOTSTRAP": self.kafka_tls_bootstrap,
            "KAFKA_TLS_CAFILE": str(self.kafka_pki.ca_cert),
            "KAFKA_TLS_CERTFILE": str(self.kafka_pki.client_cert),
            "KAFKA_TLS_KEYFILE": str(self.kafka_pki.client_key),
            "FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS": self.kafka_bootstrap,
            "FAULT_AGENT_KUBE__KUBECONFIG": str(self.kubeconfig),
            # a single-broker testbed: create the topics with one replica; keep the outbox in the testbed folder
            "FAULT_AGENT_KAFKA__CREATE_TOPICS": "true",
            "FAULT_AGENT_KAFKA__TOPIC_REPLICATION_FACTOR": "1",
            "FAULT_AGENT_KAFKA__OUTBOX_DIR": str(self.workdir / "outbox"),
            "FAULT_AGENT_SERVER__BIND_ADDRESS": "127.0.0.1",
            # the Lease and breaker ConfigMap go to "default" (deploy/'s namespace is for the deploy tests)
            "FAULT_AGENT_LEADER__NAMESPACE": "default",
            # an agent run by hand here is the cluster admin, whom no admission policy confines: with the default
            # policy.admission_check=refuse it would decide and never act; warn acts and says so loudly
            "FAULT_AGENT_POLICY__ADMISSION_CHECK": "warn",
        }

    # ----- internals ---------------------------------------------------------------------------------------
    def _terminate(self, comp: Component) -> None:
        pid = comp.current_pid()
        if pid is None or not comp.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
        if not self._reap(comp, 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._reap(comp, 10)

    @staticmethod
    def _reap(comp: Component, timeout_s: float) -> bool:
        if comp.proc is not None:
            try:
                comp.proc.wait(timeout=timeout_s)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not comp.alive():
                return True
            time.sleep(0.1)
        return False

    def _wait(self, name: str, check: Any, timeout_s: float) -> None:
        comp = self.components[name]
        deadline = time.monotonic() + timeout_s
        last_err = ""
        while True:
            if not comp.alive():
                raise TestbedError(f"{name} exited during start-up; log: {comp.log}\n{_tail(comp.log)}")
            try:
                if check():
                    return
            except Exception as e:
                last_err = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                raise TestbedError(
                    f"{name} not healthy within {timeout_s:.0f} s ({last_err or 'probe said not ready'}); "
                    f"log: {comp.log}\n{_tail(comp.log)}"
                )
            time.sleep(0.2)

    def _etcd_healthy(self) -> bool:
        import urllib.request

        with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
            return bool(json.loads(r.read()).get("health") == "true")

    def _apiserver_ready(self) -> bool:
        return self.rest().get_text("/readyz") == "ok"

    def _volcano_queue_exists(self) -> bool:
        try:
            self.rest().get("/apis/scheduling.volcano.sh/v1beta1/queues/default")
        except RestError:
            return False
        return True

    def _jobset_ready(self) -> bool:
        """JobSet's manager answers its readiness probe (its webhook server is serving)."""
        if not self.ports.jobset_health:
            return True
        with socket.create_connection(("127.0.0.1", self.ports.jobset_health), timeout=1) as conn:
            conn.sendall(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return conn.recv(64).split(b" ", 2)[1:2] == [b"200"]

    def _register_jobset_webhooks(self) -> None:
        """Register JobSet's own defaulting and validating webhooks for JobSets (not its pod webhooks, which
        would sit in the path of every pod of the suite) at the manager's loopback webhook server, as JobSet's
        manifests register them in a cluster (config/components/webhook/manifests.yaml: paths
        ``/mutate-jobset-x-k8s-io-v1alpha2-jobset`` and ``/validate-jobset-x-k8s-io-v1alpha2-jobset``)."""
        if not self.ports.jobset_webhook:
            return
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        rule = {
            "apiGroups": ["jobset.x-k8s.io"],
            "apiVersions": ["v1alpha2"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["jobsets"],
        }

        def hook(name: str, path: str) -> dict[str, Any]:
            return {
                "name": name,
                "clientConfig": {"url": f"https://127.0.0.1:{self.ports.jobset_webhook}{path}", "caBundle": ca},
                "rules": [rule],
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }

        rest = self.rest()
        rest.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "testbed-jobset-mutating"},
                "webhooks": [hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset")],
            }
        )
        rest.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "testbed-jobset-validating"},
                "webhooks": [hook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset")],
            }
        )

    def _jobset_config(self) -> Path:
        """JobSet's manager configuration (``config.jobset.x-k8s.io/v1alpha1`` Configuration, api/config/v1alpha1
        in sigs.k8s.io/jobset): no leader election, no internal certificate management (it would want a Secret and
        a Service in its own namespace), the webhook server on a loopback port with the apiserver's certificate
        (signed by the testbed CA, valid for 127.0.0.1), metrics off, the readiness probe on a loopback port."""
        pki = self.workdir / "pki"
        certs = pki / "jobset-webhook"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pki / "apiserver.crt", certs / "tls.crt")
        shutil.copyfile(pki / "apiserver.key", certs / "tls.key")
        cfg = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.ports.jobset_webhook, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports.jobset_health}"},
        }
        path = self.workdir / "jobset-config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        return path

    def _default_sa_exists(self) -> bool:
        try:
            self.rest().get("/api/v1/namespaces/default/serviceaccounts/default")
        except RestError:
            return False
        return True

    def _kafka_ready(self) -> bool:
        comp = self.components["kafka"]
        with comp.log.open("rb") as f:
            f.seek(comp.log_offset)
            log = f.read().decode("utf-8", errors="replace")
        if "Kafka Server started" not in log:
            return False
        for port in (self.ports.kafka, self.ports.kafka_tls):
            if port:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    def _install_manifests(self, operator_crds: Path, jobset_crd: Path) -> None:
        """Our CRDs and namespaces (testbed/manifests/), then the Prometheus Operator's ServiceMonitor and
        PrometheusRule CRDs (`operator_crds`, see build.prometheus_operator_crds) and JobSet's own CRD
        (`jobset_crd`, see build.jobset_bins), each waited for until Established."""
        rest = self.rest()
        key, _, value = ascend_operator.NAMESPACE_LABEL.partition("=")
        rest.merge_patch("/api/v1/namespaces/default", {"metadata": {"labels": {key: value}}})
        paths = sorted(MANIFESTS.glob("*.yaml")) + [operator_crds / name for name in build.OPERATOR_CRDS]
        paths.append(jobset_crd)
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if doc:
                    rest.apply(doc)
        deadline = time.monotonic() + 60
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if doc and doc["kind"] == "CustomResourceDefinition":
                    name = doc["metadata"]["name"]
                    while not rest.crd_established(name):
                        if time.monotonic() > deadline:
                            raise TestbedError(f"CRD {name} not Established within 60 s")
                        time.sleep(0.2)

    def _pki(self) -> None:
        pki = self.workdir / "pki"
        if (pki / "apiserver.crt").exists():
            return
        pki.mkdir(parents=True, exist_ok=True)
        openssl = shutil.which("openssl")
        if openssl is None:
            raise TestbedError("openssl is not installed (Debian: apt-get install -y openssl)")

        def run(*args: str) -> None:
            res = subprocess.run([openssl, *args], cwd=pki, capture_output=True, text=True)
            if res.returncode != 0:
                raise TestbedError(f"openssl {' '.join(args[:2])} failed: {res.stderr.strip()}")

        run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=fault-agent-testbed-ca",
        )
        (pki / "san.cnf").write_text(
            "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n",
            encoding="utf-8",
        )
        run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "apiserver.key",
            "-out",
            "apiserver.csr",
            "-subj",
            "/CN=kube-apiserver",
        )
        run(
            "x509",
            "-req",
            "-in",
            "apiserver.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "apiserver.crt",
            "-days",
            "3650",
            "-extfile",
            "san.cnf",
        )
        run("genrsa", "-out", "sa.key", "2048")
        run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        (pki / "tokens.csv").write_text(f'{self.token},testbed-admin,testbed-admin,"system:masters"\n')

    def _kubeconfig(self) -> None:
        tokens = (self.workdir / "pki" / "tokens.csv").read_text().split(",", 1)
        self.token = tokens[0]
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "testbed",
                    "cluster": {"server": self.apiserver_url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "testbed-admin", "user": {"token": self.token}}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed-admin"}}],
            "current-context": "testbed",
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        self.kubeconfig.chmod(0o600)
        kwok_user = {"token": self.token, "as": KWOK_USER, "as-groups": ["system:masters"]}
        cfg["users"] = [{"name": KWOK_USER, "user": kwok_user}]
        cfg["contexts"] = [{"name": "testbed", "context": {"cluster": "testbed", "user": KWOK_USER}}]
        self.kwok_kubeconfig.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        self.kwok_kubeconfig.chmod(0o600)

    def _define(self, bins: dict[str, Path]) -> None:
        p = self.ports
        pki = self.workdir / "pki"
        k8s = bins["kubernetes"]
        kafka_dir = self.workdir / "kafka"
        self._kafka_config(kafka_dir)
        java = shutil.which("java") or "java"
        self.components = {
            "etcd": Component(
                "etcd",
                [
                    str(bins["etcd"] / "etcd"),
                    "--name=testbed",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{p.etcd}",
                    f"--advertise-client-urls=http://127.0.0.1:{p.etcd}",
                    f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                    f"--initial-cluster=testbed=http://127.0.0.1:{p.etcd_peer}",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                    "--quota-backend-bytes=8589934592",
                ],
                self.logs_dir / "etcd.log",
            ),
            "kube-apiserver": Component(
                "kube-apiserver",
                [
                    str(k8s / "kube-apiserver"),
                    f"--etcd-servers={self.etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={p.apiserver}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    f"--token-auth-file={pki / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    # on by default since 1.30; named so deploy/admission-policy.yaml is enforced here for sure
                    "--enable-admission-plugins=ValidatingAdmissionPolicy",
                    "--service-cluster-ip-range=10.0.0.0/24",
                    "--allow-privileged=true",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    f"--cert-dir={pki}",
                    f"--enable-priority-and-fairness={str(self.priority_and_fairness).lower()}",
                    *(
                        [
                            f"--max-requests-inflight={self.max_requests_inflight}",
                            f"--max-mutating-requests-inflight={max(1, self.max_requests_inflight // 2)}",
                        ]
                        if self.max_requests_inflight
                        else []
                    ),
                    "--v=0",
                ],
                self.logs_dir / "kube-apiserver.log",
            ),
            "kube-controller-manager": Component(
                "kube-controller-manager",
                [
                    str(k8s / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    f"--secure-port={p.kcm}",
                    "--bind-address=127.0.0.1",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    "--use-service-account-credentials=false",
                    "--controllers=*,-nodeipam,-service-lb-controller",
                    "--v=0",
                ],
                self.logs_dir / "kube-controller-manager.log",
            ),
            "kube-scheduler": Component(
                "kube-scheduler",
                [
                    str(k8s / "kube-scheduler"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    f"--secure-port={p.scheduler}",
                    "--bind-address=127.0.0.1",
                    "--v=0",
                ],
                self.logs_dir / "kube-scheduler.log",
            ),
            "kwok": Component(
                "kwok",
                [
                    str(bins["kwok"] / "kwok"),
                    f"--kubeconfig={self.kwok_kubeconfig}",
                    "--manage-all-nodes=true",
                    # a pod labelled so is kwok's no more: no stage, and a delete kwok queued earlier stays queued
                    # (tests/integration/test_testbed.py holds such a delete with it)
                    f"--disregard-status-with-label-selector={KWOK_OFF}",
                    f"--server-address=127.0.0.1:{p.kwok}",
                    "--node-ip=127.0.0.1",
                    "--cidr=10.240.0.0/16",
                    "--node-lease-duration-seconds=40",
                    f"--config={KWOK_STAGES}",
                ],
                self.logs_dir / "kwok.log",
            ),
            "vc-controller-manager": Component(
                "vc-controller-manager",
                [
                    str(bins["volcano"] / "vc-controller-manager"),
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--controllers=job-controller,pg-controller,queue-controller,gc-controller",
                    *VOLCANO_CONTROLLER_PROFILES[self.volcano_controller],
                    f"--listen-address=127.0.0.1:{p.vc_controller}",
                    f"--healthz-address=127.0.0.1:{p.vc_controller_healthz}",
                    "--enable-healthz=true",
                    f"-v={volcano_log_level()}",
                ],
                self.logs_dir / "vc-controller-manager.log",
            ),
            "vc-scheduler": Component(
                "vc-scheduler",
                [
                    str(bins["volcano"] / "vc-scheduler"),
                    f"--kubeconfig={self.kubeconfig}",
                    "--leader-elect=false",
                    "--scheduler-name=volcano",
                    "--schedule-period=200ms",
                    f"--listen-address=127.0.0.1:{p.vc_scheduler}",
                    f"--healthz-address=127.0.0.1:{p.vc_scheduler_healthz}",
                    "--enable-healthz=true",
                    f"-v={volcano_log_level(VC_SCHEDULER_LOG_LEVEL_ENV)}",
                ],
                self.logs_dir / "vc-scheduler.log",
            ),
            "npu-plugin": Component(
                "npu-plugin",
                [sys.executable, "-m", "testbed.npu_plugin", f"--kubeconfig={self.kubeconfig}"],
                self.logs_dir / "npu-plugin.log",
                env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            ),
            # the Ascend Operator stand-in (testbed/ascend_operator.py) manages AscendJobs in namespaces labelled
            # ascend_operator.NAMESPACE_LABEL only (`default` is labelled at start): the suite's other tests create
            # AscendJobs with no controller
            "ascend-operator": Component(
                "ascend-operator",
                [
                    sys.executable,
                    "-m",
                    "testbed.ascend_operator",
                    f"--kubeconfig={self.kubeconfig}",
                    f"--namespace-label={ascend_operator.NAMESPACE_LABEL}",
                ],
                self.logs_dir / "ascend-operator.log",
                env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            ),
            # JobSet's controller manager (sigs.k8s.io/jobset, built by build.jobset_bins): the JobSet and pod
            # reconcilers; its CRD is installed at start (_install_manifests)
            "jobset-manager": Component(
                "jobset-manager",
                [
                    str(bins["jobset"] / "jobset-manager"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--config={self._jobset_config()}",
                    "--zap-log-level=info",
                ],
                self.logs_dir / "jobset-manager.log",
            ),
            "kafka": Component(
                "kafka",
                [
                    java,
                    "-Xms256m",
                    "-Xmx512m",
                    "-XX:+UseSerialGC",
                    "-Djava.awt.headless=true",
                    f"-Dkafka.logs.dir={self.logs_dir}",
                    "-cp",
                    str(bins["kafka"]) + "/*",
                    "kafka.Kafka",
                    str(kafka_dir / "server.properties"),
                ],
                self.logs_dir / "kafka.log",
            ),
        }

    def _kafka_config(self, kafka_dir: Path) -> None:
        props = kafka_dir / "server.properties"
        if props.exists():
            return
        kafka_dir.mkdir(parents=True, exist_ok=True)
        p = self.ports
        pki = self.kafka_pki
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.bootstrap.servers=127.0.0.1:{p.kafka_controller}",
                    f"listeners=PLAINTEXT://127.0.0.1:{p.kafka},SSL://127.0.0.1:{p.kafka_tls},"
                    f"CONTROLLER://127.0.0.1:{p.kafka_controller}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{p.kafka},SSL://127.0.0.1:{p.kafka_tls}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:PLAINTEXT",
                    # the TLS listener: PEM files made by testbed/tls.py; a client certificate signed by the same
                    # CA is required (mutual TLS)
                    "listener.name.ssl.ssl.keystore.type=PEM",
                    f"listener.name.ssl.ssl.keystore.location={pki.broker_keystore}",
                    "listener.name.ssl.ssl.truststore.type=PEM",
                    f"listener.name.ssl.ssl.truststore.location={pki.ca_cert}",
                    "listener.name.ssl.ssl.client.auth=required",
                    f"log.dirs={kafka_dir / 'data'}",
                    "num.partitions=3",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=3",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "log.flush.interval.messages=9223372036854775807",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        lib = str(build.kafka_lib()) + "/*"
        java = shutil.which("java") or "java"
        uuid = subprocess.run(
            [java, "-cp", lib, "kafka.tools.StorageTool", "random-uuid"], capture_output=True, text=True, timeout=120
        )
        if uuid.returncode != 0:
            raise TestbedError(f"Kafka StorageTool random-uuid failed: {uuid.stderr.strip()[-2000:]}")
        cluster_id = uuid.stdout.strip().splitlines()[-1]
        fmt = subprocess.run(
            [java, "-cp", lib, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id, "-c", str(props)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if fmt.returncode != 0:
            raise TestbedError(f"Kafka storage format failed: {(fmt.stdout + fmt.stderr).strip()[-2000:]}")

    # ----- state file (for `python -m testbed up/down/status/env`) ------------------------------------------
    def _save_state(self) -> None:
        state = {
            "ports": vars(self.ports),
            "token": self.token,
            "kafka_tls": {
                "bootstrap": self.kafka_tls_bootstrap,
                "cafile": str(self.kafka_pki.ca_cert),
                "certfile": str(self.kafka_pki.client_cert),
                "keyfile": str(self.kafka_pki.client_key),
            },
            "versions": {
                "kubernetes": versions.KUBERNETES,
                "etcd": versions.ETCD,
                "kwok": versions.KWOK,
                "kafka": versions.KAFKA,
                "helm": versions.HELM,
                "prometheus-operator": versions.PROMETHEUS_OPERATOR,
                "jobset": versions.JOBSET,
            },
            "components": {
                n: {"argv": c.argv, "log": str(c.log), "pid": c.current_pid()} for n, c in self.components.items()
            },
        }
        (self.workdir / "state.json").write_text(json.dumps(state, indent=2), encoding="utf-8")

    @classmethod
    def attach(cls, workdir: Path) -> Testbed:
        """Reattach to a testbed started earlier (by `python -m testbed up`) from its state file.

        Raises:
            TestbedError: no state file in `workdir`.
        """
        path = workdir / "state.json"
        if not path.exists():
            raise TestbedError(f"no testbed state in {workdir} (start one with `python -m testbed up`)")
        state = json.loads(path.read_text(encoding="utf-8"))
        tb = cls(workdir, Ports(**state["ports"]), die_with_parent=False)
        tb.token = state["token"]
        for name, c in state["components"].items():
            tb.components[name] = Component(name, c["argv"], Path(c["log"]), pid=c["pid"])
        controller = tb.components.get("vc-controller-manager")
        argv = set(controller.argv) if controller is not None else set()
        tb.volcano_controller = next(
            (name for name, extra in VOLCANO_CONTROLLER_PROFILES.items() if extra and set(extra) <= argv), "volcano"
        )  # as it was started
        return tb


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text)
