"""`fault-agent submit -f FILE [--dry-run] [--wait]`: create a job's ConfigMaps, then the job.

The order is the integration guide's: ``rings-config-<job>`` first (an existing one is reused), then, when the
job's labels need it (``pod-rescheduling: on`` or ``subHealthyStrategy: graceExit``, agent.core.resetconfig
``reset_config_reason``) or the file holds it, ``reset-config-<job>`` (the rescheduler's channel to the training
processes; built as :func:`agent.core.resetconfig.initial_reset_config` unless the file has one; an existing one is
reused), then the Volcano Job or AscendJob. Submitting the same job again is a no-op when the job in the cluster
already has the file's spec, and an error when it differs; it never creates a second job. ``--dry-run`` sends the
creates as server-side dry runs (``dryRun=All``): the apiserver validates and admits them but stores nothing.
``--wait`` follows the job until it runs or fails.

Exit codes: 0 done (or nothing to do), 1 error, 3 --wait timed out, 4 the job failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.core.cluster import JobKind
from agent.core.detect.nesting import yaml_load_all
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL, POD_RESCHEDULING_LABEL
from agent.core.job_labels import SUB_HEALTHY_LABEL as SUB_HEALTHY_STRATEGY_LABEL
from agent.core.resetconfig import initial_reset_config, reset_config_name, reset_config_reason
from agent.kube.errors import KubeApiError, KubeConnectionError, translated
from agent.platform.builders import (
    FRAMEWORK_LABEL,
    RING_CONTROLLER_LABEL,
    TOR_AFFINITY_LABEL,
    build_rings_config,
    rings_config_name,
    to_wire,
)
from agent.platform.kubeapi import (
    JOB_APIS,
    VOLCANO_DONE_PHASES,
    VOLCANO_FAILED_PHASES,
    PlatformError,
    add_kube_arguments,
    connect,
    connection_error,
    context_namespace,
    describe_kube_error,
    job_kind_of,
    job_phase,
    login,
)
from agent.platform.lint import job_uses_gpus, lint_documents

EXIT_TIMEOUT = 3
EXIT_JOB_FAILED = 4

# Labels that switch fault tolerance on or tune it: a file that drops one of them asks for a different job.
FAULT_TOLERANCE_LABELS = frozenset(
    {
        FAULT_SCHEDULING_LABEL,
        FAULT_RETRY_TIMES_LABEL,
        POD_RESCHEDULING_LABEL,
        SUB_HEALTHY_STRATEGY_LABEL,
        RING_CONTROLLER_LABEL,
        FRAMEWORK_LABEL,
        TOR_AFFINITY_LABEL,
    }
)
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True, slots=True)
class SubmitPlan:
    """What a file asks to create: the job manifest, its rings-config ConfigMap (from the file or built; for a
    JobSet only from the file, None without one: a GPU job has no rank table) and its reset-config ConfigMap (from
    the file, or built when the job's labels need one; None: neither)."""

    kind: JobKind
    namespace: str
    name: str
    job: dict[str, Any]
    rings_config: dict[str, Any] | None  # None: a GPU job, which has no HCCL rank table
    rings_config_from_file: bool
    reset_config: dict[str, Any] | None = None
    reset_config_from_file: bool = False

    @property
    def ref(self) -> str:
        return f"{JOB_APIS[self.kind].object_kind} {self.namespace}/{self.name}"


def plan_documents(docs: Sequence[Any], namespace: str | None, default_namespace: str = "default") -> SubmitPlan:
    """Turn a job file's documents into a SubmitPlan. Pure.

    Args:
        docs: parsed YAML documents (None entries are skipped).
        namespace: -n; it must agree with a namespace written in the file (as with kubectl).
        default_namespace: used when neither -n nor the file names one.

    Raises:
        PlatformError: no job or several, a document that is neither the job nor its rings-config or
            reset-config, a job without metadata.name, or a namespace conflict.
    """
    jobs: list[tuple[JobKind, dict[str, Any]]] = []
    config_maps: list[dict[str, Any]] = []
    for n, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise PlatformError(f"document {n} is a {type(doc).__name__}, not a Kubernetes object")
        kind = job_kind_of(doc)
        if kind is not None:
            jobs.append((kind, doc))
        elif doc.get("apiVersion") == "v1" and doc.get("kind") == "ConfigMap":
            config_maps.append(doc)
        else:
            raise PlatformError(f"document {n} ({doc.get('apiVersion')} {doc.get('kind')}) is not a job or ConfigMap")
    if len(jobs) != 1:
        raise PlatformError(f"the file must hold exactly one Volcano Job, AscendJob or JobSet, found {len(jobs)}")
    kind, job = jobs[0]
    meta = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise PlatformError("the job has no metadata.name (generateName is refused: it would duplicate the job)")
    wanted = rings_config_name(name)
    rings = [cm for cm in config_maps if (cm.get("metadata") or {}).get("name") == wanted]
    resets = [cm for cm in config_maps if (cm.get("metadata") or {}).get("name") == reset_config_name(name)]
    others = [str((cm.get("metadata") or {}).get("name")) for cm in config_maps if cm not in rings + resets]
    if others:
        raise PlatformError(
            f"unexpected ConfigMap(s) {', '.join(others)}: submit creates only {wanted}, "
            f"{reset_config_name(name)} and the job"
        )
    written = {str(o["metadata"]["namespace"]) for o in [job, *rings, *resets] if o["metadata"].get("namespace")}
    if len(written) > 1:
        raise PlatformError(f"the job and its ConfigMap are in different namespaces: {', '.join(sorted(written))}")
    if namespace and written and namespace not in written:
        raise PlatformError(f"the file says namespace {written.pop()} but -n says {namespace}")
    ns = namespace or (written.pop() if written else default_namespace)
    job = {**job, "metadata": {**job["metadata"], "namespace": ns}}
    cm: dict[str, Any] | None
    if rings:
        cm = {**rings[0], "metadata": {**rings[0]["metadata"], "namespace": ns}}
    elif kind is JobKind.JOBSET:
        cm = None
    elif RING_CONTROLLER_LABEL not in (job["metadata"].get("labels") or {}) and job_uses_gpus(job):
        cm = None  # a GPU job (nvidia.com/gpu): no rank table to write
    else:
        labels = job["metadata"].get("labels") or {}
        cm = to_wire(build_rings_config(name, ns, str(labels.get(RING_CONTROLLER_LABEL) or "ascend-910b")))
    reset: dict[str, Any] | None = None
    if resets:
        reset = {**resets[0], "metadata": {**resets[0]["metadata"], "namespace": ns}}
    elif reset_config_reason({str(k): str(v) for k, v in (job["metadata"].get("labels") or {}).items()}):
        reset = initial_reset_config(name, ns)
    return SubmitPlan(kind, ns, name, job, cm, bool(rings), reset, bool(resets))


def spec_matches(wanted: Any, actual: Any) -> bool:
    """True when every field of `wanted` has the same value in `actual` (fields the server added are ignored)."""
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and spec_matches(v, actual[k]) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(wanted) == len(actual)
            and all(spec_matches(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    return bool(wanted == actual)


def removed_labels(wanted: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Labels the job in the cluster has but the file dropped, and that count as a change. Pure.

    A label counts when it is a fault-tolerance label (FAULT_TOLERANCE_LABELS) or when the job's previous
    submission had it, as far as that can be told: kubectl's last-applied-configuration annotation. Other labels
    the cluster added (controllers, admission webhooks) are ignored.

    Args:
        wanted: the file's job labels.
        current: the job as the apiserver returned it (wire-format dict).
    """
    meta = current.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    previous: set[str] = set()
    annotations = meta.get("annotations")
    applied = annotations.get(LAST_APPLIED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(applied, str):
        try:
            doc = json.loads(applied)
        except ValueError:
            doc = None
        old = doc.get("metadata", {}).get("labels") if isinstance(doc, dict) else None
        if isinstance(old, dict):
            previous = {str(k) for k in old}
    return sorted(k for k in labels if k not in wanted and (k in FAULT_TOLERANCE_LABELS or k in previous))


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """What submit did: `config_map` (the rings-config), `job` and `reset_config` are "created",
    "reused"/"exists" or "would create" (dry run); `config_map` and `reset_config` are "" when the plan has none
    (a GPU job has no rings-config)."""

    config_map: str
    job: str
    job_uid: str
    reset_config: str = ""


async def _ensure_config_map(
    core: Any, namespace: str, body: dict[str, Any], dry: Any, say: Callable[[str], None]
) -> str:
    """Create the ConfigMap `body` unless it exists (reused). Returns "created", "reused" or "would create".

    Raises:
        PlatformError: the apiserver refused the read or the create.
    """
    name = body["metadata"]["name"]
    try:
        with translated():
            existing = await core.read_namespaced_config_map(name, namespace)
    except KubeApiError as e:
        if e.status != 404:
            raise describe_kube_error(e, f"read ConfigMap {namespace}/{name}") from e
        existing = None
    if existing is not None:
        say(f"ConfigMap {namespace}/{name} exists (uid {existing.metadata.uid}): reusing it")
        return "reused"
    try:
        with translated():
            await core.create_namespaced_config_map(namespace, body, dry_run=dry)
    except KubeApiError as e:
        if e.status != 409:
            raise describe_kube_error(e, f"create ConfigMap {namespace}/{name}") from e
        say(f"ConfigMap {namespace}/{name} was created meanwhile: reusing it")
        return "reused"
    say(f"ConfigMap {namespace}/{name} {'would be created (server-side dry run)' if dry else 'created'}")
    return "would create" if dry else "created"


async def submit_plan(api: Any, plan: SubmitPlan, *, dry_run: bool, say: Callable[[str], None]) -> SubmitResult:
    """Create the rings-config ConfigMap and, when planned, the reset-config one (reuse existing ones), then the job.

    A ConfigMap created here is deleted again when the apiserver refuses the job. An existing job is left
    alone: same labels and spec (fields the server added aside) is a no-op, anything else an error, including a
    fault-tolerance label the file no longer has (see removed_labels).

    Args:
        api: a logged-in kubernetes_asyncio ApiClient.
        say: receives one progress line per step.

    Raises:
        PlatformError: the apiserver refused an object (its message and causes are in the text), or the job
            already exists with a different spec.
    """
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    job_api = JOB_APIS[plan.kind]
    dry: Any = "All" if dry_run else None  # None: the parameter is left out
    cm_state = ""
    created_cms: list[str] = []
    if plan.rings_config is not None:
        cm_name = plan.rings_config["metadata"]["name"]
        cm_state = await _ensure_config_map(core, plan.namespace, plan.rings_config, dry, say)
        created_cms = [cm_name] if cm_state == "created" else []
    reset_state = ""
    if plan.reset_config is not None:
        reset_state = await _ensure_config_map(core, plan.namespace, plan.reset_config, dry, say)
        if reset_state == "created":
            created_cms.append(plan.reset_config["metadata"]["name"])

    try:
        with translated():
            created = await custom.create_namespaced_custom_object(
                job_api.group, job_api.version, plan.namespace, job_api.plural, plan.job, dry_run=dry
            )
    except KubeApiError as e:
        if e.status != 409:
            error = describe_kube_error(e, f"create {plan.ref}")
            for made in created_cms:
                # Leave nothing half-done: a ConfigMap created above belongs to a job that does not exist.
                try:
                    with translated():
                        await core.delete_namespaced_config_map(made, plan.namespace)
                    say(f"ConfigMap {plan.namespace}/{made} deleted again (the job was refused)")
                except KubeApiError as e2:
                    say(f"ConfigMap {plan.namespace}/{made} could not be deleted again: HTTP {e2.status}")
            raise error from e
        try:
            with translated():
                current = await custom.get_namespaced_custom_object(
                    job_api.group, job_api.version, plan.namespace, job_api.plural, plan.name
                )
        except KubeApiError as e2:
            raise describe_kube_error(e2, f"read {plan.ref}") from e2
        uid = str(current.get("metadata", {}).get("uid", ""))
        wanted = {"labels": plan.job["metadata"].get("labels") or {}, "spec": plan.job.get("spec")}
        actual = {"labels": current.get("metadata", {}).get("labels") or {}, "spec": current.get("spec")}
        removed = removed_labels(plan.job["metadata"].get("labels") or {}, current)
        if removed or not spec_matches(wanted, actual):
            dropped = f" (the file drops label(s) {', '.join(removed)})" if removed else ""
            raise PlatformError(
                f"{plan.ref} already exists (uid {uid}) with different labels or spec{dropped}; nothing was "
                "changed. Delete it first or submit under another name."
            ) from e
        phase = job_phase(plan.kind, current) or "no status yet"
        say(f"{plan.ref} already exists with this spec (uid {uid}, phase {phase}): nothing to do")
        return SubmitResult(cm_state, "exists", uid, reset_state)
    uid = str(created.get("metadata", {}).get("uid", "")) if isinstance(created, dict) else ""
    if dry_run:
        say(f"{plan.ref} would be created (server-side dry run: validated and admitted, nothing stored)")
        return SubmitResult(cm_state, "would create", uid, reset_state)
    say(f"{plan.ref} created (uid {uid})")
    return SubmitResult(cm_state, "created", uid, reset_state)


async def wait_for_job(
    api: Any,
    plan: SubmitPlan,
    *,
    timeout_s: float,
    poll_s: float = 1.0,
    say: Callable[[str], None],
) -> int:
    """Follow the job until it runs, completes or fails; report each change of phase or pod count.

    Returns:
        0 when the job is Running (or done), EXIT_JOB_FAILED when it failed.

    Raises:
        PlatformError: (exit code EXIT_TIMEOUT) no verdict within `timeout_s` seconds; the message gives
            the last phase and pod count and, when no pods exist, points at the missing controller.
    """
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    job_api = JOB_APIS[plan.kind]
    started = time.monotonic()
    last: tuple[str, int, int] | None = None
    phase, pods, running = "", 0, 0
    while True:
        try:
            with translated():
                job = await custom.get_namespaced_custom_object(
                    job_api.group, job_api.version, plan.namespace, job_api.plural, plan.name
                )
                pod_list = await core.list_namespaced_pod(
                    plan.namespace, label_selector=f"{job_api.pod_job_label}={plan.name}"
                )
        except KubeApiError as e:
            raise describe_kube_error(e, f"read {plan.ref}") from e
        phase = job_phase(plan.kind, job)
        pods = len(pod_list.items)
        running = len([p for p in pod_list.items if p.status is not None and p.status.phase == "Running"])
        elapsed = time.monotonic() - started
        if (phase, pods, running) != last:
            say(f"[{elapsed:5.1f}s] {plan.ref}: phase {phase or 'none yet'}, pods {running}/{pods} running")
            last = (phase, pods, running)
        if plan.kind is JobKind.JOBSET and phase == "Running" and not (pods and running == pods):
            pass  # a JobSet is "Running" (no terminal condition) from its first status on: wait for its pods
        elif phase in ("Running", "Succeeded") or phase in VOLCANO_DONE_PHASES:
            return 0
        if phase in VOLCANO_FAILED_PHASES or phase == "Failed":
            say(f"{plan.ref} failed (phase {phase})")
            return EXIT_JOB_FAILED
        if elapsed >= timeout_s:
            hint = ""
            if pods == 0 and plan.kind is JobKind.VOLCANO:
                hint = (
                    "; no pods were created: Volcano's controller creates them once the job's PodGroup is Inqueue, "
                    "so either the controller is not running or the cluster cannot place the job's minAvailable "
                    f"pods now (kubectl -n {plan.namespace} get podgroups; the node capacity; the queue)"
                )
            elif pods == 0:
                hint = "; no pods were created: is the AscendJob operator running?"
            raise PlatformError(
                f"timed out after {timeout_s:g} s waiting for {plan.ref} to run: phase "
                f"{phase or 'none yet (no status)'}, {running}/{pods} pods running{hint}",
                EXIT_TIMEOUT,
            )
        await asyncio.sleep(min(poll_s, max(0.0, timeout_s - elapsed)))


def read_job_file(path: str) -> list[Any]:
    """The documents of a YAML job file ('-' reads standard input).

    Raises:
        PlatformError: unreadable file or invalid YAML (with line and column).
    """
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise PlatformError(f"{path}: cannot read: {reason}") from e
    try:
        return yaml_load_all(text)  # refuses a document nested too deep for PyYAML's recursion, with its line
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise PlatformError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from e


async def _submit(args: argparse.Namespace) -> int:
    docs = read_job_file(args.file)
    if not args.skip_lint:
        problems = lint_documents(docs, args.file)
        for p in problems:
            print(p)
        errors = [p for p in problems if p.is_error]
        if errors:
            raise PlatformError(f"{len(errors)} lint problem(s); fix them or pass --skip-lint")
    plan = plan_documents(docs, args.namespace, context_namespace(*login(args)))
    api = await connect(args)
    try:
        try:
            await submit_plan(api, plan, dry_run=args.dry_run, say=print)
            if args.wait and not args.dry_run:
                return await wait_for_job(api, plan, timeout_s=args.timeout, say=print)
        except KubeConnectionError as e:
            raise connection_error(e.__cause__ or e, api) from e
    finally:
        await api.close()
    return 0


def _positive_seconds(text: str) -> float:
    """argparse type of --timeout: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_submit(args))
    except PlatformError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `fault-agent submit`."""
    parser.add_argument(
        "-f", "--file", required=True, help="job file: a Volcano Job, AscendJob (+ rings-config) or JobSet"
    )
    parser.add_argument("--dry-run", action="store_true", help="server-side dry run: validate, store nothing")
    parser.add_argument("--wait", action="store_true", help="follow the job until it runs or fails")
    parser.add_argument("--timeout", type=_positive_seconds, default=600.0, help="seconds --wait waits (default 600)")
    parser.add_argument("--skip-lint", action="store_true", help="submit even when lint finds problems")
    add_kube_arguments(parser)
    parser.set_defaults(func=_run)
