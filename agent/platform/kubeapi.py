"""Shared Kubernetes plumbing of `submit` and `status`: job APIs, phases, kubeconfig arguments, error text.

The job APIs are Volcano's `batch.volcano.sh/v1alpha1` jobs, MindCluster's `mindxdl.gitee.com/v1`
ascendjobs (shared/DOMAIN.md §2) and `jobset.x-k8s.io/v1alpha2` jobsets (docs/jobset.md). Error text comes
from the apiserver's metav1.Status body (`message`, `details.causes[].field/message`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from agent.core.cluster import JobKind
from agent.core.jobset import JOBSET_NAME_LABEL
from agent.kube.client import new_api_client, resolve_kubeconfig
from agent.kube.errors import KubeApiError, KubeConfigError, answer_error
from agent.platform.builders import (
    ASCEND_API_VERSION,
    ASCEND_JOB_NAME_LABEL,
    ASCEND_KIND,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    VOLCANO_API_VERSION,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_KIND,
)


class PlatformError(Exception):
    """A failure to report to the person at the terminal: `str()` is the whole message; `exit_code` for the CLI."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class JobApi:
    """Where a job kind lives in the API and how its pods point back at it."""

    kind: JobKind
    api_version: str
    object_kind: str
    plural: str
    pod_job_label: str  # label on the job's pods whose value is the job name

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/")[1]


JOB_APIS: dict[JobKind, JobApi] = {
    JobKind.VOLCANO: JobApi(JobKind.VOLCANO, VOLCANO_API_VERSION, VOLCANO_KIND, "jobs", VOLCANO_JOB_NAME_LABEL),
    JobKind.ASCEND: JobApi(JobKind.ASCEND, ASCEND_API_VERSION, ASCEND_KIND, "ascendjobs", ASCEND_JOB_NAME_LABEL),
    JobKind.JOBSET: JobApi(JobKind.JOBSET, JOBSET_API_VERSION, JOBSET_KIND, "jobsets", JOBSET_NAME_LABEL),
}

# Volcano phases after which the job will not run again by itself.
VOLCANO_FAILED_PHASES = frozenset({"Failed", "Aborted", "Terminated"})
VOLCANO_DONE_PHASES = frozenset({"Completed"})


def job_kind_of(doc: Mapping[str, Any]) -> JobKind | None:
    """The JobKind of a manifest (by apiVersion and kind), or None for anything else."""
    for api in JOB_APIS.values():
        if doc.get("apiVersion") == api.api_version and doc.get("kind") == api.object_kind:
            return api.kind
    return None


def job_phase(kind: JobKind, job: Mapping[str, Any]) -> str:
    """The job's phase: Volcano `status.state.phase`; AscendJob: type of the newest True condition; JobSet: its
    first True condition of Failed, Completed, Suspended, else Running (sigs.k8s.io/jobset ``JobSetConditionType``).

    Returns "" when the job has no status yet (no controller has seen it).
    """
    status = job.get("status")
    if not isinstance(status, Mapping):
        return ""
    if kind is JobKind.JOBSET:
        conditions = status.get("conditions")
        true = (
            {c.get("type") for c in conditions if isinstance(c, Mapping) and c.get("status") == "True"}
            if isinstance(conditions, list)
            else set()
        )
        return next((t for t in ("Failed", "Completed", "Suspended") if t in true), "Running")
    if kind is JobKind.VOLCANO:
        state = status.get("state")
        phase = state.get("phase") if isinstance(state, Mapping) else None
        return phase if isinstance(phase, str) else ""
    conditions = status.get("conditions")
    best = ""
    best_time = ""
    if isinstance(conditions, list):
        for cond in conditions:
            if not isinstance(cond, Mapping) or cond.get("status") != "True":
                continue
            when = str(cond.get("lastTransitionTime") or cond.get("lastUpdateTime") or "")
            if when >= best_time:
                best, best_time = str(cond.get("type") or ""), when
    return best


def describe_kube_error(exc: KubeApiError, what: str) -> PlatformError:
    """A readable error from a refused request: the apiserver's Status message and each cause's field
    (agent.kube.errors.KubeApiError ``server_message`` and ``causes``).

    Args:
        exc: the typed error of the answer.
        what: what was being done, e.g. "create Job vcjob/mindx-dls-test".
    """
    message = exc.server_message or f"{exc.status} {exc.reason}".strip()
    text = f"cannot {what}: the apiserver said (HTTP {exc.status}): {message}"
    if exc.causes and not all(c in message for c in exc.causes):
        text += "".join(f"\n  - {c}" for c in exc.causes)
    return PlatformError(text)


def describe_api_exception(exc: Any, what: str) -> PlatformError:
    """:func:`describe_kube_error` of a `kubernetes_asyncio` client error (has `status`, `reason`, `body`), for
    a caller holding the client's own error (agent.platform.submit's tests build one).
    """
    status = int(getattr(exc, "status", 0) or 0)
    return describe_kube_error(answer_error(status, getattr(exc, "reason", ""), getattr(exc, "body", None), None), what)


LOGIN_ORDER = (
    "--kubeconfig, else kube.kubeconfig (FAULT_AGENT_KUBE__KUBECONFIG or --config), else the in-cluster "
    "ServiceAccount, else $KUBECONFIG, else ~/.kube/config"
)
"""How every subcommand that talks to the cluster finds it (README "Operators' CLI"): the agent's own order with a
command-line flag first."""


def add_login_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """--kubeconfig and --context, as kubectl spells them; resolved by :func:`login` the same way in every
    subcommand that talks to the cluster. `suppress`: no default (a nested parser's, so that a value given
    before its action is not overwritten)."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--kubeconfig", default=default, help=f"kubeconfig path (default: {LOGIN_ORDER.partition(', ')[2]})"
    )
    parser.add_argument(
        "--context", default=default, help="kubeconfig context (default: kube.context, else the current context)"
    )


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    """--kubeconfig, --context and -n/--namespace, as kubectl spells them."""
    add_login_arguments(parser)
    parser.add_argument("-n", "--namespace", help="namespace (default: the context's namespace, else 'default')")


def login(args: argparse.Namespace, settings: Any | None = None) -> tuple[str | None, str | None]:
    """(kubeconfig path, context) for a subcommand: ``--kubeconfig`` / ``--context``, else the settings'
    ``kube.kubeconfig`` / ``kube.context`` (`settings`, else loaded from ``--config`` and the environment as the
    agent loads them); (None, None) leaves the choice to :func:`agent.kube.client.new_api_client` (in-cluster,
    then $KUBECONFIG, then ~/.kube/config). The order is :data:`LOGIN_ORDER`.

    Raises:
        PlatformError: the settings cannot be loaded (exit code 2), naming each bad setting.
    """
    if settings is None:
        from agent.settings import SettingsError, load_settings

        try:
            settings = load_settings(getattr(args, "config", None))
        except SettingsError as e:
            raise PlatformError(f"settings: {e}", 2) from e
    kubeconfig = getattr(args, "kubeconfig", None) or settings.kube.kubeconfig or None
    context = getattr(args, "context", None) or settings.kube.context or None
    return kubeconfig, context


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace set on the kubeconfig context in use, else "default".

    "default" also when there is no kubeconfig or it cannot be read (not UTF-8, not YAML): logging in
    (`connect`) reports that file with a clear error afterwards.
    """
    try:
        path = resolve_kubeconfig(kubeconfig)
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (KubeConfigError, OSError, UnicodeDecodeError, yaml.YAMLError):
        return "default"
    if not isinstance(doc, dict):
        return "default"
    name = context or doc.get("current-context")
    for entry in doc.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            ns = (entry.get("context") or {}).get("namespace")
            return ns if isinstance(ns, str) and ns else "default"
    return "default"


async def connect(args: argparse.Namespace) -> Any:
    """A logged-in ApiClient, the cluster found as :func:`login` says (:data:`LOGIN_ORDER`).

    Raises:
        PlatformError: bad settings, no usable kubeconfig or unknown context.
    """
    kubeconfig, context = login(args)
    try:
        return await new_api_client(kubeconfig, context)
    except KubeConfigError as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise PlatformError(f"cannot log in to the cluster (kubeconfig {where}): {e}") from e


def connection_error(exc: BaseException, client: Any) -> PlatformError:
    """An error for an apiserver that cannot be reached (aiohttp ClientConnectionError, timeouts)."""
    host = getattr(getattr(client, "configuration", None), "host", "the apiserver")
    return PlatformError(f"cannot reach the apiserver at {host}: {exc or type(exc).__name__}")
