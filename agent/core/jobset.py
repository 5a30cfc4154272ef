"""JobSet (``jobset.x-k8s.io/v1alpha2``) restart semantics, as its controller applies them. Pure.

Read from sigs.k8s.io/jobset v0.10.1 (the same code in v0.11.0), ``pkg/controllers/failure_policy.go`` and
``jobset_controller.go`` (docs/jobset.md says more):

- A JobSet restarts only when one of its child Jobs has the ``Failed`` condition. Without
  ``spec.failurePolicy`` the first failed child Job fails the whole JobSet (no restart at all).
- With a failure policy the rules are tried in order; the first rule that applies to a failed Job (its
  ``onJobFailureReasons`` contain the Job's failure reason, its ``onJobFailureMessagePatterns`` match the message,
  its ``targetReplicatedJobs`` contain the Job's replicated job; an empty list matches all) gives the action; no
  rule applying means ``RestartJobSet``.
- ``RestartJobSet``: refused (the JobSet is marked Failed, reason ``ReachedMaxRestarts``) once
  ``status.restartsCountTowardsMax >= spec.failurePolicy.maxRestarts``; else ``status.restarts`` and
  ``status.restartsCountTowardsMax`` both go up by one. ``RestartJobSetAndIgnoreMaxRestarts``: ``status.restarts``
  only, never refused. ``FailJobSet``: the JobSet is marked Failed.
- A restart recreates every child Job: Jobs whose ``jobset.sigs.k8s.io/restart-attempt`` label is below
  ``status.restarts`` are deleted and created again with the new attempt number (their pods carry it too).

An outside component makes JobSet restart by failing a child Job. The agent does it by deleting pods: the Job
controller counts a deleted, not succeeded pod as failed (with a ``podFailurePolicy`` only once the pod is
terminal), so a Job with ``backoffLimit: 0`` fails with reason ``BackoffLimitExceeded``; with a higher backoff limit
the Job only re-creates the pod (no JobSet restart). An eviction or a drain (the Eviction API puts the
``DisruptionTarget`` condition on the pod) fails the Job with reason ``PodFailurePolicy`` when the Job's
``podFailurePolicy`` has a ``FailJob`` rule on that condition; a JobSet rule ``RestartJobSetAndIgnoreMaxRestarts``
on ``PodFailurePolicy`` then restarts it without spending ``maxRestarts``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""Label JobSet puts on its child Jobs and their pods: the JobSet's name (api/jobset/v1alpha2 ``JobSetNameKey``)."""
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
"""The JobSet's UID on its child Jobs and pods (``JobSetUIDKey``)."""
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
"""``status.restarts`` at the time the child Job was created, on the Job and its pods (pkg/constants
``RestartsKey``)."""

BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
"""The Job's ``Failed`` condition reason once its failed pods exceed ``spec.backoffLimit`` (batch/v1
``JobReasonBackoffLimitExceeded``)."""
POD_FAILURE_POLICY = "PodFailurePolicy"
"""The Job's ``Failed`` condition reason when a ``FailJob`` rule of its podFailurePolicy matched (batch/v1
``JobReasonPodFailurePolicy``)."""
JOB_DEFAULT_BACKOFF_LIMIT = 6
"""A Job's ``spec.backoffLimit`` when unset (batch/v1 default)."""


class RuleAction(enum.StrEnum):
    """A JobSet failure policy rule's action (api/jobset/v1alpha2 ``FailurePolicyAction``)."""

    FAIL_JOBSET = "FailJobSet"
    RESTART_JOBSET = "RestartJobSet"
    RESTART_IGNORE_MAX = "RestartJobSetAndIgnoreMaxRestarts"


_SEVERITY = {RuleAction.RESTART_IGNORE_MAX: 0, RuleAction.RESTART_JOBSET: 1, RuleAction.FAIL_JOBSET: 2}


@dataclass(frozen=True, slots=True)
class FailureRule:
    """One ``spec.failurePolicy.rules[]`` entry. Empty tuples match everything (as JobSet reads them)."""

    name: str
    action: RuleAction
    on_job_failure_reasons: tuple[str, ...] = ()
    on_job_failure_message_patterns: tuple[str, ...] = ()
    target_replicated_jobs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicatedJob:
    """What of one ``spec.replicatedJobs[]`` decides how its Job answers a deleted pod.

    Attributes:
        name: the replicated job's name.
        backoff_limit: the Job template's ``spec.backoffLimit`` (:data:`JOB_DEFAULT_BACKOFF_LIMIT` when unset).
        disruption_fails_job: that policy has a ``FailJob`` rule on the ``DisruptionTarget`` pod condition.
        exit_code_rules: that policy has rules on container exit codes (the exit code of a deleted pod's
            container is the workload's: such a rule may ignore or fail the deletion; the agent does not guess).
    """

    name: str
    backoff_limit: int = JOB_DEFAULT_BACKOFF_LIMIT
    disruption_fails_job: bool = False
    exit_code_rules: bool = False


@dataclass(frozen=True, slots=True)
class JobSetSpec:
    """The parts of a JobSet's spec that decide its restarts. `max_restarts` is None when the JobSet has no
    ``spec.failurePolicy``."""

    max_restarts: int | None
    rules: tuple[FailureRule, ...]
    replicated_jobs: tuple[ReplicatedJob, ...]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What JobSet does when a child Job fails for `reason`.

    Attributes:
        action: the rule's action (the worst one a rule with message patterns might give, since the agent cannot
            know the message), or None when JobSet would not restart at all (no failure policy: FailJobSet).
        rule: the name of the rule that gave it ("" for the default, RestartJobSet).
        text: a sentence for the reasons a person reads.
    """

    action: RuleAction | None
    rule: str
    text: str

    @property
    def restarts(self) -> bool:
        """JobSet restarts the JobSet (within maxRestarts for RestartJobSet)."""
        return self.action in (RuleAction.RESTART_JOBSET, RuleAction.RESTART_IGNORE_MAX)

    @property
    def counts(self) -> bool:
        """The restart counts against ``maxRestarts`` (``status.restartsCountTowardsMax`` + 1)."""
        return self.action is RuleAction.RESTART_JOBSET


def rule_outcome(spec: JobSetSpec, reason: str, replicated_job: str) -> Outcome:
    """What JobSet's failure policy does with a child Job of `replicated_job` that failed for `reason`
    (``findFirstFailedPolicyRuleAndJob`` and ``ruleIsApplicable`` in pkg/controllers/failure_policy.go).

    A rule with ``onJobFailureMessagePatterns`` depends on the Job's condition message, which the agent does not
    know in advance: such a rule may or may not apply, and the worse of the two outcomes is returned
    (FailJobSet worse than RestartJobSet worse than RestartJobSetAndIgnoreMaxRestarts), so no decision promises a
    restart JobSet may refuse.
    """
    if spec.max_restarts is None:
        return Outcome(None, "", "the JobSet has no spec.failurePolicy: JobSet fails it at its first failed child Job")
    return _first_rule(spec.rules, reason, replicated_job)


def _first_rule(rules: tuple[FailureRule, ...], reason: str, replicated_job: str) -> Outcome:
    for i, rule in enumerate(rules):
        if rule.on_job_failure_reasons and reason not in rule.on_job_failure_reasons:
            continue
        if rule.target_replicated_jobs and replicated_job not in rule.target_replicated_jobs:
            continue
        name = rule.name or f"rules[{i}]"
        here = Outcome(rule.action, name, f"failure policy rule {name} ({rule.action.value}) on {reason}")
        if not rule.on_job_failure_message_patterns:
            return here
        rest = _first_rule(rules[i + 1 :], reason, replicated_job)
        worse = here if _severity(here) >= _severity(rest) else rest
        return Outcome(worse.action, worse.rule, f"{worse.text} (rule {name} matches the failure message by pattern)")
    return Outcome(RuleAction.RESTART_JOBSET, "", f"no failure policy rule applies to {reason}: RestartJobSet")


def _severity(outcome: Outcome) -> int:
    return 3 if outcome.action is None else _SEVERITY[outcome.action]


def deletion_reason(job: ReplicatedJob) -> str | None:
    """The failure reason a child Job of `job` gets when the agent deletes one of its running pods, or None when
    the deletion does not fail the Job (the Job re-creates the pod: backoffLimit above 0, or podFailurePolicy
    exit-code rules that may ignore it). Only backoffLimit 0 without exit-code rules is certain:
    ``BackoffLimitExceeded`` (k8s.io/kubernetes pkg/controller/job ``isPodFailed``: a deleted pod that did not
    succeed counts as failed)."""
    if job.backoff_limit != 0 or job.exit_code_rules:
        return None
    return BACKOFF_LIMIT_EXCEEDED


def disruption_reason(job: ReplicatedJob) -> str | None:
    """The failure reason a child Job of `job` gets when one of its pods is evicted (DisruptionTarget): the
    podFailurePolicy's FailJob rule on that condition gives ``PodFailurePolicy``; else as a deletion."""
    if job.disruption_fails_job:
        return POD_FAILURE_POLICY
    return deletion_reason(job)


@dataclass(frozen=True, slots=True)
class RestartBudget:
    """How a JobSet answers the agent's restart (deleting its pods) and the eviction of one of its pods.

    Attributes:
        limit: ``maxRestarts`` when the agent's restart counts against it, -1 when it never does
            (RestartJobSetAndIgnoreMaxRestarts), 0 when JobSet will not restart the JobSet on the agent's
            deletion at all (see `why`).
        why: where `limit` comes from, for the reasons a person reads.
        evictions_counted: an eviction's restart counts against ``maxRestarts`` (or fails the JobSet).
        eviction_text: what JobSet does on an eviction, for the docs and ``lint``.
    """

    limit: int
    why: str
    evictions_counted: bool
    eviction_text: str


def restart_budget(spec: JobSetSpec) -> RestartBudget:
    """How JobSet counts the agent's restarts of a JobSet with `spec` (the worst case over its replicated jobs,
    since the agent's restart may hit any of them). Pure."""
    limit, why = -1, ""
    evictions_counted, eviction_text = False, ""
    if not spec.replicated_jobs:
        return RestartBudget(0, "the JobSet has no replicated jobs", True, "")
    for job in spec.replicated_jobs:
        reason = deletion_reason(job)
        if reason is None:
            return RestartBudget(
                0,
                f"a deleted pod of replicated job {job.name} does not fail its Job (backoffLimit "
                f"{job.backoff_limit}{', podFailurePolicy exit-code rules' if job.exit_code_rules else ''}): its "
                "Job re-creates the pod and JobSet does not restart; set backoffLimit 0",
                True,
                "",
            )
        out = rule_outcome(spec, reason, job.name)
        if not out.restarts:
            return RestartBudget(0, out.text, True, "")
        if out.counts and limit < 0:
            limit, why = spec.max_restarts or 0, out.text
        elif limit < 0 and not why:
            why = out.text
        disruption = disruption_reason(job)
        dout = rule_outcome(spec, disruption, job.name) if disruption is not None else out
        if dout.counts or not dout.restarts:
            evictions_counted = True
            eviction_text = f"an eviction of a pod of {job.name}: {dout.text}"
        elif not eviction_text:
            eviction_text = f"an eviction: {dout.text}"
    return RestartBudget(limit, why, evictions_counted, eviction_text)


def restarts_left(limit: int, counted: int) -> int | None:
    """Restarts JobSet still grants the agent: ``limit - status.restartsCountTowardsMax`` (JobSet refuses once
    ``restartsCountTowardsMax >= maxRestarts``), None when unlimited (`limit` -1). Never negative."""
    if limit < 0:
        return None
    return max(0, limit - counted)
