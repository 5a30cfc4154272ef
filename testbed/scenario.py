"""Apply a scenario file (agent.replay.scenario) to the testbed's apiserver, step by step at its times.

``python -m testbed scenario FILE [--dir D] [--speed X]`` or :func:`apply_scenario` from a test: the same files
serve tests, bug reports and (later) replays. ``apply`` creates the object, or replaces it when it exists (the
current resourceVersion is copied in); ``delete`` counts 404 as done; ``patch`` is a JSON merge patch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from agent.replay.scenario import Step
from testbed.rest import Rest, RestError


def object_path(step: Step) -> str:
    """The object's URL path, e.g. ``/api/v1/namespaces/train/pods/p0``."""
    return f"{step.kind.collection_path(step.namespace)}/{step.name}"


def apply_step(rest: Rest, step: Step) -> None:
    """Carry out one step. Raises RestError (the apiserver refused it; 404 on delete is not an error)."""
    if step.op == "delete":
        try:
            rest.request("DELETE", object_path(step))
        except RestError as e:
            if e.status != 404:
                raise
        return
    assert step.body is not None
    if step.op == "patch":
        rest.merge_patch(object_path(step), step.body)
        return
    try:
        rest.request("POST", step.kind.collection_path(step.namespace), step.body)
    except RestError as e:
        if e.status != 409:
            raise
        current = rest.get(object_path(step))
        body: dict[str, Any] = {**step.body, "metadata": dict(step.body["metadata"])}
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        rest.request("PUT", object_path(step), body)


def apply_scenario(
    rest: Rest,
    steps: Sequence[Step],
    *,
    speed: float = 1.0,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Apply `steps` in order, each at its ``at`` (divided by `speed`) after the call.

    Raises:
        RestError: a step was refused; the message names the step's line.
    """
    start = monotonic()
    for step in steps:
        wait = start + step.at_s / speed - monotonic()
        if wait > 0:
            sleep(wait)
        try:
            apply_step(rest, step)
        except RestError as e:
            raise RestError(e.status, f"scenario line {step.line}: {step.op} {object_path(step)}: {e}") from e
