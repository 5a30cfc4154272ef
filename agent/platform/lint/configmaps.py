"""The ConfigMaps beside a job in its file: ``rings-config-<job>`` and ``reset-config-<job>``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.core.resetconfig import (
    KEY_RESET,
    RESET_LABEL,
    ResetConfigError,
    parse_reset_config,
    reset_config_name,
    reset_config_reason,
)
from agent.platform.builders import (
    RING_CONTROLLER_LABEL,
    RINGS_CONFIG_KEY,
)
from agent.platform.lint.common import (
    WARNING,
    Checker,
    get_in,
)


def check_reset_config(
    c: Checker, job_name: str, labels: Mapping[str, Any], cms: Mapping[str, tuple[int, Any]], job_namespace: Any
) -> None:
    """reset-config-<job>: the file alone decides (lint reads no cluster). A job whose labels need one
    (agent.core.resetconfig ``reset_config_reason``) and a file without it is a warning: ``fault-agent submit``
    creates it, ``kubectl apply`` of this file would not. One in the file must be readable and labelled."""
    cm_name = reset_config_name(job_name)
    reason = reset_config_reason({str(k): str(v) for k, v in labels.items()})
    if cm_name not in cms:
        if reason is not None:
            c.add(
                "metadata.labels",
                "reset-config-missing",
                f'{reason} needs a ConfigMap {cm_name} (label reset: "true"): the rescheduler tells the '
                "training processes to restart or exit through it. fault-agent submit creates it with the job; "
                "add it to this file if you apply it with kubectl (fault-agent lint reads only this file)",
                WARNING,
            )
        return
    document, cm = cms[cm_name]
    cc = Checker(c.file, document)
    namespace = get_in(cm, "metadata", "namespace")
    if namespace != job_namespace:
        cc.add(
            "metadata.namespace",
            "reset-config-namespace",
            f"ConfigMap {cm_name} is in namespace {namespace!r} but the job in {job_namespace!r}",
        )
    cm_labels = get_in(cm, "metadata", "labels")
    if not isinstance(cm_labels, Mapping) or cm_labels.get(RESET_LABEL[0]) != RESET_LABEL[1]:
        cc.add("metadata.labels", "reset-config-label-missing", f'ConfigMap {cm_name} needs the label reset: "true"')
    data = get_in(cm, "data")
    try:
        if not isinstance(data, Mapping):
            raise ResetConfigError("missing-key", "no data")
        parse_reset_config({str(k): str(v) for k, v in data.items()})
    except ResetConfigError as e:
        cc.add(f"data.{KEY_RESET}", "reset-config-invalid", f"ConfigMap {cm_name}: {e}")
    c.problems.extend(cc.problems)


def check_rings_config(c: Checker, found: tuple[int, Any], job_namespace: Any) -> None:
    """``rings-config-<job>`` found in the file (its document number and object): same namespace as the job, the
    ``ring-controller.atlas`` label, ``hccl.json`` starting as ``{"status": "initializing"}``."""
    document, cm = found
    cc = Checker(c.file, document)
    name = get_in(cm, "metadata", "name")
    namespace = get_in(cm, "metadata", "namespace")
    if namespace != job_namespace:
        cc.add(
            "metadata.namespace",
            "rings-config-namespace",
            f"ConfigMap {name} is in namespace {namespace!r} but the job in {job_namespace!r}",
        )
    labels = get_in(cm, "metadata", "labels")
    if not isinstance(labels, Mapping) or RING_CONTROLLER_LABEL not in labels:
        cc.add(
            "metadata.labels", "rings-config-label-missing", f"ConfigMap {name} has no {RING_CONTROLLER_LABEL} label"
        )
    hccl = get_in(cm, "data", RINGS_CONFIG_KEY)
    if hccl is None:
        cc.add(
            f"data.{RINGS_CONFIG_KEY}", "rings-config-hccl-missing", f"ConfigMap {name} has no {RINGS_CONFIG_KEY} key"
        )
    else:
        try:
            status = get_in(json.loads(hccl), "status") if isinstance(hccl, str) else None
        except (json.JSONDecodeError, RecursionError):  # Python's json parser recurses once per level
            status = None
        if status != "initializing":
            cc.add(
                f"data.{RINGS_CONFIG_KEY}",
                "rings-config-hccl-invalid",
                f'{RINGS_CONFIG_KEY} must start as {{"status": "initializing"}}, got {hccl!r}',
            )
    c.problems.extend(cc.problems)
