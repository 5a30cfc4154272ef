"""Rendering `status`: one job's view, the table of jobs, the training time, and the breaker and leader lines
(`breaker show` prints the same). Pure apart from the console it prints to."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.core.goodput import JobGoodput
from agent.core.incidents import (
    Incident,
    Phase,
)
from agent.platform.kubeapi import (
    JOB_APIS,
)
from agent.platform.status.views import (
    JobView,
)

PIPE_WIDTH = 200  # output width when stdout is not a terminal (and neither --width nor $COLUMNS says otherwise)


def _fraction(used: int | None, budget: int | str | None, *, unlimited: bool = False) -> str:
    if unlimited:
        return f"{'?' if used is None else used} / unlimited"
    if budget is None:  # unknown, or no label (no business retries): never "unlimited" unless it is
        return "-" if used is None else f"{used} / -"
    return f"{'?' if used is None else used} / {budget}"


def incident_summary(incident: Incident | None) -> str:
    """One line: id, phase, action and fault count; "none" without an incident."""
    if incident is None:
        return "none"
    parts = [incident.id, incident.phase.value]
    if incident.action:
        parts.append(f"action {incident.action}" + (f" ({incident.mode})" if incident.mode else ""))
    parts.append(f"{incident.fault_count} fault(s)")
    return ", ".join(parts)


def render_job(view: JobView, console: Console) -> None:
    """Print one job's view: header lines, a pods table, the incident and the agent's record (raw, when it could
    not be read)."""
    kind = JOB_APIS[view.kind].object_kind
    console.print(f"[bold]{kind} {view.namespace}/{view.name}[/bold]  uid {view.uid}")
    console.print(f"phase:            {view.phase or 'none yet (no controller has reported a status)'}")
    console.print(f"fault-scheduling: {view.fault_scheduling}")
    retries = _fraction(view.retries_used, view.retry_budget, unlimited=view.retry_unlimited)
    console.print(f"retries:          {retries} (job controller)")
    if view.retry_rule:
        console.print(f"  {view.retry_rule}", markup=False, highlight=False)
    console.print(f"business retries: {_fraction(view.business_used, view.business_budget)} (fault-retry-times)")
    console.print(f"open incident:    {incident_summary(view.open_incident)}")
    if view.incident is not None and view.open_incident is None:
        console.print(f"last incident:    {incident_summary(view.incident)}")
    if view.incident is not None and view.incident.reason:
        console.print(f"  reason: {view.incident.reason}", markup=False, highlight=False)
    if view.open_incident is not None and view.open_incident.phase is Phase.HELD:
        console.print(
            "  held: the open circuit breaker holds this incident; nothing is restarted until a person runs "
            "`fault-agent breaker reset` (see `fault-agent breaker show`)",
            markup=False,
            highlight=False,
        )
    if view.incident is not None and view.incident.faults:
        for fault in view.incident.faults:
            console.print(f"  fault: {fault}", markup=False)
    if view.restart_policy_warning:
        console.print(f"[yellow]restart policy:[/yellow] {view.restart_policy_warning}", highlight=False)
    if view.pods:
        table = Table("pod", "phase", "node", "restarts")
        for p in view.pods:
            table.add_row(p.name, p.phase, p.node or "(unscheduled)", str(p.restarts))
        console.print(table)
    else:
        console.print("pods:             none")
    for problem in (*view.label_problems, *view.problems):
        console.print(f"[yellow]unreadable:[/yellow] {escape(problem)}", highlight=False)
    if view.problems:
        for key, value in view.raw_annotations:
            console.print(f"  {key}: {value}", markup=False, highlight=False)


def render_table(
    views: Sequence[JobView], console: Console, *, training: Mapping[tuple[str, str], JobGoodput] | str | None = None
) -> None:
    """Print the watched jobs as one table (namespace, kind, name, phase, mode, retries, incident); with
    `training` (``--training``: each job's effective training time from the events topic, or why it could not be
    read) a last column with the job's running share."""
    columns = ["namespace", "kind", "job", "phase", "fault-scheduling", "retries", "business", "incident"]
    table = Table(*columns, *(["training"] if training is not None else []))
    for v in views:
        extra: list[str] = []
        if isinstance(training, str):
            extra = ["unknown"]
        elif training is not None:
            extra = [training_share(training.get((v.namespace, v.name)))]
        table.add_row(
            v.namespace,
            v.kind.value,
            v.name,
            v.phase or "-",
            v.fault_scheduling,
            _fraction(v.retries_used, v.retry_budget, unlimited=v.retry_unlimited),
            _fraction(v.business_used, v.business_budget),
            incident_summary(v.open_incident) if not v.problems else "unreadable annotation",
            *extra,
        )
    console.print(table)
    if isinstance(training, str):
        console.print(f"training: {training}", markup=False, highlight=False)


def training_share(row: JobGoodput | None) -> str:
    """The table's training cell: the running share, or "-" without a resumed event."""
    s = row.summary if row is not None else None
    return "-" if s is None or s.running_share is None else f"{100 * s.running_share:.1f}%"


def training_text(row: JobGoodput | None) -> str:
    """The one-job view's training line (see :func:`training_rows`)."""
    if row is None:
        return "no recovery.resumed event (not restarted since it reports its progress, or it does not report it)"
    s = row.summary
    causes = ", ".join(f"{c} {v:.1f}s" for c, v in s.lost_by_cause.items())
    return (
        f"{training_share(row)} productive: {s.productive_s:.0f}s of {s.wall_s:.0f}s since {_iso(s.first_step_at)}; "
        f"lost {s.lost_s:.1f}s ({causes}) in {s.incidents} incident(s), {s.work_lost_steps} step(s) computed again"
    )


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def breaker_line(data: Mapping[str, str] | None, where: str) -> str:
    """The breaker's state from its ConfigMap data (None: no ConfigMap), in the words `status` and `breaker show`
    both print (:func:`state_line`). Pure."""
    if data is None:
        return (
            f"closed (no ConfigMap {where} yet: the agent writes it when the breaker first trips; "
            "check leader.namespace)"
        )
    state = data.get("state", "closed")
    if state != "open":
        reset = f", reset by {data['reset_by']}" if data.get("reset_by") else ""
        return f"{state} (ConfigMap {where}{reset})"
    tripped = ""
    with contextlib.suppress(ValueError, OverflowError, OSError):
        tripped = f" {_iso(datetime.fromtimestamp(float(data.get('tripped_at', '')), UTC))}"
    reason = f": {data['reason']}" if data.get("reason") else ""
    return (
        f"OPEN since{tripped or ' an unknown time'} (ConfigMap {where}){reason}; reset with `fault-agent breaker reset`"
    )


def state_line(what: str, text: str) -> str:
    """One line of the agent's state as `status` prints it below the jobs and `breaker show` first:
    ``breaker:  OPEN since …`` (the label padded to 9 columns)."""
    return f"{what + ':':<9} {text}"


def leader_line(
    holder: str | None, renewed: datetime | None, duration_s: float | None, where: str, now: datetime
) -> str:
    """The leader from its Lease's holderIdentity, renewTime and leaseDurationSeconds. Pure."""
    if not holder:
        return f"unknown (Lease {where} has no holder: no agent replica leads)"
    if renewed is None:
        return f"{holder} (Lease {where}, never renewed)"
    ago = (now - renewed).total_seconds()
    text = f"{holder}, renewed {_iso(renewed)} ({ago:.0f} s ago; Lease {where})"
    if duration_s is not None and ago > duration_s:
        text += f"; EXPIRED: not renewed for more than {duration_s:g} s, the holder may be gone"
    return text


def output_width(requested: int | None, is_terminal: bool, environ: Mapping[str, str]) -> int | None:
    """--width, else the terminal's (None: rich asks it), else $COLUMNS, else PIPE_WIDTH: no cut at 80 in a pipe."""
    if requested is not None or is_terminal or environ.get("COLUMNS", "").isdigit():
        return requested
    return PIPE_WIDTH
