"""JobSets (``jobset.x-k8s.io/v1alpha2``) → :class:`~agent.core.cluster.JobRecord`.

Read from the JobSet: the fault-tolerance labels (``fault-scheduling``, ``fault-retry-times``, … on the JobSet and its
pod templates ``spec.replicatedJobs[].template.spec.template``), ``spec.failurePolicy`` (``maxRestarts``, ``rules``),
each replicated job's Job template (``backoffLimit``, ``podFailurePolicy``), ``status.restarts`` (the restart
attempt its current pods carry) and ``status.restartsCountTowardsMax`` (what JobSet counts against
``maxRestarts``), and ``status.conditions`` (``Failed``, ``Completed``, ``Suspended``). Field names and semantics:
sigs.k8s.io/jobset v0.10.1 ``api/jobset/v1alpha2/jobset_types.go``, ``pkg/controllers/failure_policy.go``.
"""

from __future__ import annotations

from typing import Any

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.faults import Rejection
from agent.core.job_labels import job_view, template_labels
from agent.core.jobset import (
    JOB_DEFAULT_BACKOFF_LIMIT,
    FailureRule,
    JobSetSpec,
    ReplicatedJob,
    RuleAction,
    restart_budget,
)
from agent.sources.common import Bad, Metadata, get_dict, get_int, get_list, get_str, intern, object_ref
from agent.sources.jobs import AGENT_ANNOTATION_PREFIX, KEPT_LABELS, PROCESS_RECOVER_STRATEGY_ANNOTATION

DISRUPTION_TARGET = "DisruptionTarget"
"""The pod condition the Eviction API and the taint manager put on a pod they end (core/v1
``DisruptionTarget``)."""

_PHASE_CONDITIONS = ("Failed", "Completed", "Suspended")
"""JobSet condition types that name its phase, the first True one wins (api/jobset/v1alpha2 ``JobSetConditionType``);
none True: Running."""


def jobset_spec(spec: dict[str, Any]) -> JobSetSpec:
    """The restart-relevant parts of a JobSet's ``spec``. Raises Bad (``wrong-type``) on a field of the wrong
    type, ``bad-action`` on an unknown rule action."""
    policy = spec.get("failurePolicy")
    max_restarts: int | None = None
    rules: list[FailureRule] = []
    if policy is not None:
        if not isinstance(policy, dict):
            raise Bad("wrong-type", "spec.failurePolicy is not an object")
        max_restarts = get_int(policy, "maxRestarts", "spec.failurePolicy") or 0
        for i, raw in enumerate(get_list(policy, "rules", "spec.failurePolicy")):
            where = f"spec.failurePolicy.rules[{i}]"
            if not isinstance(raw, dict):
                raise Bad("wrong-type", f"{where} is not an object")
            action = get_str(raw, "action", where)
            try:
                rule_action = RuleAction(action)
            except ValueError:
                raise Bad("bad-action", f"{where}.action {action!r} is not a JobSet failure policy action") from None
            rules.append(
                FailureRule(
                    name=get_str(raw, "name", where),
                    action=rule_action,
                    on_job_failure_reasons=_strings(raw, "onJobFailureReasons", where),
                    on_job_failure_message_patterns=_strings(raw, "onJobFailureMessagePatterns", where),
                    target_replicated_jobs=_strings(raw, "targetReplicatedJobs", where),
                )
            )
    jobs = []
    for i, raw in enumerate(get_list(spec, "replicatedJobs", "spec")):
        where = f"spec.replicatedJobs[{i}]"
        if not isinstance(raw, dict):
            raise Bad("wrong-type", f"{where} is not an object")
        job_spec = get_dict(get_dict(raw, "template", where), "spec", f"{where}.template")
        backoff = get_int(job_spec, "backoffLimit", f"{where}.template.spec")
        pfp = job_spec.get("podFailurePolicy")
        pfp_rules = pfp.get("rules") if isinstance(pfp, dict) else None
        pfp_rules = [r for r in pfp_rules if isinstance(r, dict)] if isinstance(pfp_rules, list) else []
        jobs.append(
            ReplicatedJob(
                name=get_str(raw, "name", where),
                backoff_limit=JOB_DEFAULT_BACKOFF_LIMIT if backoff is None else backoff,
                disruption_fails_job=any(_fails_on_disruption(r) for r in pfp_rules),
                exit_code_rules=any("onExitCodes" in r for r in pfp_rules),
            )
        )
    return JobSetSpec(max_restarts, tuple(rules), tuple(jobs))


def _fails_on_disruption(rule: dict[str, Any]) -> bool:
    conditions = rule.get("onPodConditions")
    return (
        rule.get("action") == "FailJob"
        and isinstance(conditions, list)
        and any(
            isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET and c.get("status", "True") == "True"
            for c in conditions
        )
    )


def _strings(obj: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    out = []
    for item in get_list(obj, key, where):
        if not isinstance(item, str):
            raise Bad("wrong-type", f"{where}.{key} holds a non-string")
        out.append(intern(item))
    return tuple(out)


def jobset_phase(conditions: list[Any]) -> str:
    """``Failed``, ``Completed`` or ``Suspended`` (the first True condition of those types), else ``Running``."""
    true = {c.get("type") for c in conditions if isinstance(c, dict) and c.get("status") == "True"}
    return next((t for t in _PHASE_CONDITIONS if t in true), "Running")


def jobset_template_labels(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of each replicated job's pod template (``spec.replicatedJobs[].template.spec.template``) with
    ``replicas`` > 0 (absent: 1). Entries of the wrong type are skipped."""
    out: list[dict[str, str]] = []
    entries = spec.get("replicatedJobs")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        count = entry.get("replicas", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            continue
        node: Any = entry
        for key in ("template", "spec", "template", "metadata", "labels"):
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            out.append({k: v for k, v in node.items() if isinstance(k, str) and isinstance(v, str)})
    return out


class JobSetConverter:
    """Callable raw JobSet dict → JobRecord (kind JOBSET), or a Rejection.

    The record's restart counters are JobSet's own: `retry_count` = ``status.restartsCountTowardsMax``, `version` =
    ``status.restarts``, `max_retry` = what :func:`agent.core.jobset.restart_budget` finds (``maxRestarts`` when the
    agent's restart counts against it, -1 when it never does, 0 when JobSet would not restart on the agent's
    deletion), `max_retry_from` says why. Rejection reasons: ``missing-metadata``, ``wrong-type``,
    ``bad-timestamp``, ``bad-action``.
    """

    def __call__(self, obj: dict[str, Any]) -> JobRecord | Rejection:
        """Convert one JobSet. Never raises."""
        try:
            return self._convert(obj)
        except Bad as e:
            return Rejection(object_ref(obj, "JobSet"), e.reason, e.detail)

    def _convert(self, obj: dict[str, Any]) -> JobRecord:
        m = Metadata(obj, "JobSet")
        generation = get_int(obj["metadata"], "generation", "metadata") or 0
        spec = get_dict(obj, "spec", "job")
        status = get_dict(obj, "status", "job")
        budget = restart_budget(jobset_spec(spec))
        restarts = get_int(status, "restarts", "status") or 0
        counted = get_int(status, "restartsCountTowardsMax", "status") or 0
        own = tuple(sorted((intern(k), intern(v)) for k, v in m.labels.items() if k in KEPT_LABELS))
        record = JobRecord(
            kind=JobKind.JOBSET,
            namespace=m.namespace,
            name=intern(m.name),
            uid=m.uid,
            resource_version=m.rv,
            generation=generation,
            labels=own,
            fault_scheduling=FaultScheduling.OFF,
            fault_retry_times=None,
            pod_rescheduling=False,
            sub_healthy_strategy="ignore",
            max_retry=budget.limit,
            min_available=None,
            phase=intern(jobset_phase(get_list(status, "conditions", "status"))),
            version=intern(str(restarts)),
            retry_count=counted,
            annotations=tuple(
                sorted((k, v) for k, v in m.annotations.items() if k.startswith(AGENT_ANNOTATION_PREFIX))
            ),
            created_at=m.created_at,
            process_recover_strategy=m.annotations.get(PROCESS_RECOVER_STRATEGY_ANNOTATION),
            max_retry_from=budget.why,
            job_labels=own,
            template_labels=template_labels(jobset_template_labels(spec)),
        )
        return job_view(record, None)
