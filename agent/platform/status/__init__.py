"""`fault-agent status [NAMESPACE/]JOB`: a job's phase, pods and nodes, retries used / budget, open incident.

Without a job, a table of the watched jobs (label `fault-scheduling` or `fault-retry-times` set) across namespaces,
or in -n, then the restart circuit breaker (ConfigMap `policy.breaker_configmap` in `leader.namespace`) and the
leader (the Lease `leader.name` in `leader.namespace`); settings come from --config and the environment as for the
agent. Either is shown as "unknown (reason)" when it cannot be read.
Retries come from the job itself (Volcano `status.retryCount` / `spec.maxRetry`, AscendJob
`spec.runPolicy.backoffLimit`, the `fault-retry-times` label) and from the agent's ledger and incident in the job's
record (ConfigMap `fault-agent-job-<job UID>` in `leader.namespace`, keys `ledger` and `incident`, see
agent.core.records; for a job no agent has written a record for yet, an earlier version's `fault-agent.io/ledger`
and `fault-agent.io/incident` annotations on the job); a value that cannot be decoded is shown raw.

The package: ``views`` reads a job into a view, ``render`` prints views and the agent's state, ``reading`` reads
the agent's records and state from the cluster; this module is the command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import aiohttp
from rich.console import Console

from agent.core.cluster import JobKind
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL
from agent.kube.errors import KubeApiError, kube_call
from agent.platform.kubeapi import (
    JOB_APIS,
    PlatformError,
    add_kube_arguments,
    connect,
    connection_error,
    context_namespace,
    describe_kube_error,
    login,
)
from agent.platform.status.reading import (
    agent_state_lines,
    job_records,
    training_rows,
)
from agent.platform.status.render import (
    PIPE_WIDTH,
    breaker_line,
    incident_summary,
    leader_line,
    output_width,
    render_job,
    render_table,
    state_line,
    training_share,
    training_text,
)
from agent.platform.status.views import (
    VOLCANO_DEFAULT_MAX_RETRY,
    JobView,
    PodLine,
    job_view,
    mapping_of,
    pod_line,
)

__all__ = [
    "MIN_WIDTH",
    "PIPE_WIDTH",
    "VOLCANO_DEFAULT_MAX_RETRY",
    "JobView",
    "PodLine",
    "agent_state_lines",
    "breaker_line",
    "configure",
    "incident_summary",
    "job_records",
    "job_view",
    "leader_line",
    "output_width",
    "parse_target",
    "pod_line",
    "render_job",
    "render_table",
    "state_line",
    "training_rows",
    "training_share",
    "training_text",
]

MIN_WIDTH = 40


def parse_target(target: str, namespace: str | None, default_namespace: str) -> tuple[str, str]:
    """Split ``[NAMESPACE/]JOB`` into (namespace, job).

    Raises:
        PlatformError: an empty part, more than one '/', or a namespace that contradicts -n.
    """
    parts = target.split("/")
    if len(parts) > 2 or not all(parts):
        raise PlatformError(f"expected [NAMESPACE/]JOB, got {target!r}", 2)
    if len(parts) == 2:
        if namespace and namespace != parts[0]:
            raise PlatformError(f"{target!r} names namespace {parts[0]} but -n says {namespace}", 2)
        return parts[0], parts[1]
    return namespace or default_namespace, parts[0]


async def _one(api: Any, args: argparse.Namespace, console: Console) -> int:
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

    namespace, name = parse_target(args.job, args.namespace, context_namespace(*login(args)))
    custom, core = CustomObjectsApi(api), CoreV1Api(api)
    kinds = [JobKind(args.kind)] if args.kind else list(JOB_APIS)
    for kind in kinds:
        ja = JOB_APIS[kind]
        try:
            job = await kube_call(custom.get_namespaced_custom_object(ja.group, ja.version, namespace, ja.plural, name))
        except KubeApiError as e:
            if e.status == 404:
                continue
            raise describe_kube_error(e, f"read {ja.object_kind} {namespace}/{name}") from e
        try:
            pods = await kube_call(core.list_namespaced_pod(namespace, label_selector=f"{ja.pod_job_label}={name}"))
        except KubeApiError as e:
            raise describe_kube_error(e, f"list the pods of {namespace}/{name}") from e
        records = await job_records(api, getattr(args, "config", None))
        uid = str(mapping_of(job, "metadata").get("uid", ""))
        render_job(job_view(kind, job, [pod_line(p) for p in pods.items], records.get(uid)), console)
        if args.training:
            rows = await training_rows(args, namespace)
            text = rows if isinstance(rows, str) else training_text(rows.get((namespace, name)))
            console.print(f"training:         {text}", markup=False, highlight=False)
        return 0
    looked = " or ".join(JOB_APIS[k].object_kind for k in kinds)
    raise PlatformError(f"no {looked} named {name} in namespace {namespace}")


async def _all(api: Any, args: argparse.Namespace, console: Console) -> int:
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

    custom = CustomObjectsApi(api)
    records = await job_records(api, getattr(args, "config", None))
    views: dict[str, JobView] = {}
    kinds = [JobKind(args.kind)] if args.kind else list(JOB_APIS)
    for kind in kinds:
        ja = JOB_APIS[kind]
        # A job opts in with either label (label selectors cannot say "or": one list each, merged by UID).
        for label in (FAULT_SCHEDULING_LABEL, FAULT_RETRY_TIMES_LABEL):
            try:
                if args.namespace:
                    listed = await kube_call(
                        custom.list_namespaced_custom_object(
                            ja.group, ja.version, args.namespace, ja.plural, label_selector=label
                        )
                    )
                else:
                    listed = await kube_call(
                        custom.list_cluster_custom_object(ja.group, ja.version, ja.plural, label_selector=label)
                    )
            except KubeApiError as e:
                if e.status == 404 and kind is JobKind.JOBSET and not args.kind:
                    break  # no JobSet CRD on this cluster: nothing to list
                raise describe_kube_error(e, f"list {ja.plural}.{ja.group}") from e
            for item in listed.get("items", []):
                uid = str(item.get("metadata", {}).get("uid", ""))
                views[uid] = job_view(kind, item, record=records.get(uid))
    ordered = sorted(views.values(), key=lambda v: (v.namespace, v.name, v.kind.value))
    if not ordered:
        if args.namespace:
            from agent.kube.client import namespace_missing

            try:
                missing = await kube_call(namespace_missing(CoreV1Api(api), args.namespace))
            except KubeApiError as e:
                raise describe_kube_error(e, f"read namespace {args.namespace}") from e
            if missing:
                raise PlatformError(f"namespace {args.namespace} does not exist", 1)
        where = f"namespace {args.namespace}" if args.namespace else "any namespace"
        console.print(f"no watched jobs (label {FAULT_SCHEDULING_LABEL} or {FAULT_RETRY_TIMES_LABEL} set) in {where}")
    else:
        training = await training_rows(args, args.namespace) if args.training else None
        render_table(ordered, console, training=training)
    for what, text in await agent_state_lines(api, getattr(args, "config", None)):
        console.print(
            state_line(what, text), markup=False, highlight=False, soft_wrap=True
        )  # one line, as `breaker show`
    return 0


def _width(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of columns, got {text!r}") from None
    if value < MIN_WIDTH:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_WIDTH} columns, got {value}")
    return value


async def _status(args: argparse.Namespace) -> int:
    console = Console(file=sys.stdout, width=output_width(args.width, sys.stdout.isatty(), os.environ))
    api = await connect(args)
    try:
        return await (_one(api, args, console) if args.job else _all(api, args, console))
    except (aiohttp.ClientError, TimeoutError) as e:
        raise connection_error(e, api) from e
    finally:
        await api.close()


def _run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_status(args))
    except PlatformError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `fault-agent status`."""
    parser.add_argument("job", nargs="?", metavar="[NAMESPACE/]JOB", help="one job; without it, all watched jobs")
    parser.add_argument("--kind", choices=[k.value for k in JobKind], help="only this job kind")
    parser.add_argument(
        "--width",
        type=_width,
        default=None,
        help=f"output width, at least {MIN_WIDTH} (default: the terminal's; {PIPE_WIDTH} when not a terminal)",
    )
    parser.add_argument(
        "--training",
        action="store_true",
        help="also show effective training time (productive vs lost since the first step, from the agent's "
        "recovery.resumed events on Kafka: reads the recoveries topic from its beginning)",
    )
    parser.add_argument(
        "--training-timeout", type=float, default=30.0, help="seconds to read the topic with --training (default 30)"
    )
    add_kube_arguments(parser)
    parser.set_defaults(func=_run)
