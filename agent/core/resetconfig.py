"""The ``reset-config-<job>`` ConfigMap: how a rescheduler tells a job's training processes to restart or exit.

Pure (no I/O, no clock reads): the caller passes the current time in and writes the returned data.

Format (MindCluster, commit 22bb3d98): ConfigMap ``reset-config-<job>`` in the job's namespace, label
``reset: "true"``, created by the platform together with the job and updated by the rescheduler. Data keys:

- ``reset.json``: Go's ``json.Marshal`` of ``TaskResetInfo`` (component/ascend-for-volcano/plugin/type.go), fields
  in this order: ``RankList`` (array of ``TaskDevInfo``, or ``null``), ``UpdateTime`` (unix seconds),
  ``RetryTime`` (int), ``FaultFlushing`` (bool), ``GracefulExit`` (int, 0 or 1), ``RestartFaultProcess`` (bool).
  ``TaskDevInfo`` is ``RankId`` (int) with ``DevFaultInfo`` embedded, so its fields are flattened into the same
  object: ``LogicId`` (int32), ``Status``, ``Policy``, ``InitialPolicy`` (strings), ``ErrorCode`` (array of
  int64, or ``null``), ``ErrorCodeHex`` (string). No JSON tags: the keys are the Go field names.
- ``checkCode``: lower-case hex SHA-256 of the same ``json.Marshal`` bytes (``util.MakeDataHash``,
  component/ascend-for-volcano/common/util/util.go), i.e. the hash of exactly the ``reset.json`` value.
- ``restartType``: ``podReschedule``; written only by the pod-level update below.

The two updates MindCluster's Volcano plugin makes (each rewrites the whole ``Data``, so a key it does not write
is dropped):

- after a job's pods are all placed again (plugin/job.go ``updateResetConfigMap`` / ``updateResetCm``, only for
  ``pod-rescheduling: on`` jobs without ``process-recover-enable: on``): ``RankList`` emptied, ``UpdateTime`` =
  now, ``RetryTime`` + 1 when only some of the job's pods were rescheduled, 0 when the whole job was; data
  ``{checkCode, reset.json, restartType: podReschedule}``. The surviving pods' processes watch this and restart.
- graceful exit (internal/rescheduling/reschedule.go ``updateResetConfigMapWithGraceExit``, for
  ``subHealthyStrategy: graceExit``): ``GracefulExit`` set to 1 before the grace deletion and back to 0 after it,
  nothing else changed; data ``{checkCode, reset.json}`` (``restartType`` is dropped).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.core.detect.checkcode import go_marshal
from agent.core.job_labels import FAULT_SCHEDULING_LABEL

RESET_CONFIG_PREFIX = "reset-config-"
KEY_RESET = "reset.json"
KEY_CHECK_CODE = "checkCode"
KEY_RESTART_TYPE = "restartType"
POD_RESCHEDULE = "podReschedule"
RESET_LABEL = ("reset", "true")
GRACEFUL_EXIT_ON = 1
GRACEFUL_EXIT_OFF = 0
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)


class ResetConfigError(ValueError):
    """``reset-config-<job>`` data that cannot be read; `reason` is a short slug (``missing-key``,
    ``bad-json``, ``wrong-type``, ``check-code-mismatch``) and the message names the field."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RankEntry:
    """One element of ``RankList`` (MindCluster ``TaskDevInfo`` with ``DevFaultInfo`` embedded).

    error_codes None is Go's nil slice (``null``); an empty tuple is ``[]``.
    """

    rank_id: int = 0
    logic_id: int = 0
    status: str = ""
    policy: str = ""
    initial_policy: str = ""
    error_codes: tuple[int, ...] | None = None
    error_code_hex: str = ""

    def to_go(self) -> dict[str, Any]:
        """The element as Go marshals it: fields in declaration order, embedded struct flattened."""
        return {
            "RankId": self.rank_id,
            "LogicId": self.logic_id,
            "Status": self.status,
            "Policy": self.policy,
            "InitialPolicy": self.initial_policy,
            "ErrorCode": None if self.error_codes is None else list(self.error_codes),
            "ErrorCodeHex": self.error_code_hex,
        }


@dataclass(frozen=True, slots=True)
class ResetInfo:
    """The ``reset.json`` payload (MindCluster ``TaskResetInfo``). update_time is unix seconds.

    rank_list None is Go's nil slice (``null``, e.g. a ConfigMap created as ``{}``); an empty tuple is ``[]``.
    """

    rank_list: tuple[RankEntry, ...] | None = None
    update_time: int = 0
    retry_time: int = 0
    fault_flushing: bool = False
    graceful_exit: int = GRACEFUL_EXIT_OFF
    restart_fault_process: bool = False

    def to_go(self) -> dict[str, Any]:
        """The payload as Go marshals it (fields in ``TaskResetInfo`` declaration order)."""
        return {
            "RankList": None if self.rank_list is None else [r.to_go() for r in self.rank_list],
            "UpdateTime": self.update_time,
            "RetryTime": self.retry_time,
            "FaultFlushing": self.fault_flushing,
            "GracefulExit": self.graceful_exit,
            "RestartFaultProcess": self.restart_fault_process,
        }


@dataclass(frozen=True, slots=True)
class ResetConfig:
    """What :func:`parse_reset_config` read: the payload, the ``restartType`` key (None if absent) and whether
    the ``checkCode`` matched (None when the key is absent, as in a ConfigMap the platform just created)."""

    info: ResetInfo
    restart_type: str | None = None
    check_code_ok: bool | None = None
    unknown_fields: tuple[str, ...] = field(default=())


def reset_config_name(job_name: str) -> str:
    """``reset-config-<job>`` for a job's name (MindCluster plugin/type.go ``ResetInfoCMNamePrefix``)."""
    return RESET_CONFIG_PREFIX + job_name


def encode_reset_info(info: ResetInfo) -> str:
    """``reset.json`` text: Go's ``json.Marshal`` bytes of the payload (no spaces, HTML-safe escapes)."""
    return go_marshal(info.to_go()).decode("utf-8")


def reset_check_code(info: ResetInfo) -> str:
    """``checkCode``: lower-case hex SHA-256 of :func:`encode_reset_info` (MindCluster ``util.MakeDataHash``)."""
    return hashlib.sha256(go_marshal(info.to_go())).hexdigest()


def reset_config_data(info: ResetInfo, *, restart_type: str | None) -> dict[str, str]:
    """The ConfigMap's whole ``data`` for `info`: ``checkCode``, ``reset.json`` and, if given, ``restartType``.

    MindCluster writes ``restartType: podReschedule`` with the pod-level update and no ``restartType`` with
    the graceful-exit update (its Update replaces all keys).
    """
    data = {KEY_CHECK_CODE: reset_check_code(info), KEY_RESET: encode_reset_info(info)}
    if restart_type is not None:
        data[KEY_RESTART_TYPE] = restart_type
    return data


def after_pods_placed(info: ResetInfo, *, now_s: int, pod_level: bool) -> ResetInfo:
    """The update once a ``pod-rescheduling: on`` job's pods are all placed again (plugin/job.go
    ``updateResetCm``): ``RankList`` = ``[]``, ``UpdateTime`` = `now_s` (unix seconds), ``RetryTime`` + 1 when
    only some pods were rescheduled (`pod_level`), else 0. Write it with ``restart_type=POD_RESCHEDULE``.

    Raises:
        ValueError: `now_s` negative.
    """
    if now_s < 0:
        raise ValueError(f"now_s must be unix seconds ≥ 0, got {now_s}")
    return replace(info, rank_list=(), update_time=now_s, retry_time=info.retry_time + 1 if pod_level else 0)


def with_graceful_exit(info: ResetInfo, *, on: bool) -> ResetInfo:
    """``GracefulExit`` = 1 (`on`, before a graceExit job's grace deletion) or 0 (after it), nothing else
    changed (internal/rescheduling/reschedule.go ``updateResetConfigMapWithGraceExit``). Write it with
    ``restart_type=None``."""
    return replace(info, graceful_exit=GRACEFUL_EXIT_ON if on else GRACEFUL_EXIT_OFF)


def _int_value(value: Any, bounds: tuple[int, int], where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise ResetConfigError("wrong-type", f"{where}: expected an integer {bounds[0]}…{bounds[1]}, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], key: str, bounds: tuple[int, int], where: str) -> int:
    return _int_value(obj.get(key, 0), bounds, f"{where}.{key}")


def _bool(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise ResetConfigError("wrong-type", f"{where}.{key}: expected true or false, got {value!r}")
    return value


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise ResetConfigError("wrong-type", f"{where}.{key}: expected a string, got {value!r}")
    return value


_INFO_KEYS = ("RankList", "UpdateTime", "RetryTime", "FaultFlushing", "GracefulExit", "RestartFaultProcess")
_RANK_KEYS = ("RankId", "LogicId", "Status", "Policy", "InitialPolicy", "ErrorCode", "ErrorCodeHex")


def _rank(el: Any, where: str, unknown: list[str]) -> RankEntry:
    if not isinstance(el, dict):
        raise ResetConfigError("wrong-type", f"{where}: expected an object, got {type(el).__name__}")
    unknown.extend(f"{where}.{k}" for k in el if k not in _RANK_KEYS)
    codes = el.get("ErrorCode")
    if codes is not None:
        if not isinstance(codes, list):
            raise ResetConfigError("wrong-type", f"{where}.ErrorCode: expected an array, got {codes!r}")
        codes = tuple(_int_value(c, _INT64, f"{where}.ErrorCode[{i}]") for i, c in enumerate(codes))
    return RankEntry(
        rank_id=_int(el, "RankId", _INT64, where),
        logic_id=_int(el, "LogicId", _INT32, where),
        status=_str(el, "Status", where),
        policy=_str(el, "Policy", where),
        initial_policy=_str(el, "InitialPolicy", where),
        error_codes=codes,
        error_code_hex=_str(el, "ErrorCodeHex", where),
    )


def parse_reset_info(text: str) -> tuple[ResetInfo, tuple[str, ...]]:
    """Read a ``reset.json`` value. Missing fields take Go's zero values (as ``json.Unmarshal`` leaves them).

    Returns the payload and the dotted names of fields it does not know (kept for a warning; Go ignores them).

    Raises:
        ResetConfigError: not JSON (``bad-json``), not an object or a field of the wrong type (``wrong-type``).
    """
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ResetConfigError("bad-json", f"{KEY_RESET}: {e}") from e
    if not isinstance(obj, dict):
        raise ResetConfigError("wrong-type", f"{KEY_RESET}: expected an object, got {type(obj).__name__}")
    unknown = [k for k in obj if k not in _INFO_KEYS]
    ranks = obj.get("RankList")
    rank_list: tuple[RankEntry, ...] | None = None
    if ranks is not None:
        if not isinstance(ranks, list):
            raise ResetConfigError("wrong-type", f"{KEY_RESET}.RankList: expected an array, got {ranks!r}")
        rank_list = tuple(_rank(el, f"{KEY_RESET}.RankList[{i}]", unknown) for i, el in enumerate(ranks))
    info = ResetInfo(
        rank_list=rank_list,
        update_time=_int(obj, "UpdateTime", _INT64, KEY_RESET),
        retry_time=_int(obj, "RetryTime", _INT64, KEY_RESET),
        fault_flushing=_bool(obj, "FaultFlushing", KEY_RESET),
        graceful_exit=_int(obj, "GracefulExit", _INT64, KEY_RESET),
        restart_fault_process=_bool(obj, "RestartFaultProcess", KEY_RESET),
    )
    return info, tuple(unknown)


def parse_reset_config(data: Mapping[str, str]) -> ResetConfig:
    """Read a ``reset-config-<job>`` ConfigMap's ``data``.

    The ``checkCode``, when present, is compared with the SHA-256 of the ``reset.json`` text as stored (that is
    what MindCluster hashed: its marshal output). A mismatch is reported in ``check_code_ok``, not raised: the
    caller decides (MindCluster's own reader, the plugin, does not verify it before updating).

    Raises:
        ResetConfigError: no ``reset.json`` key (``missing-key``) or an unreadable one (see
            :func:`parse_reset_info`).
    """
    text = data.get(KEY_RESET)
    if text is None:
        raise ResetConfigError("missing-key", f"no {KEY_RESET} key")
    info, unknown = parse_reset_info(text)
    code = data.get(KEY_CHECK_CODE)
    ok = None if code is None else hashlib.sha256(text.encode("utf-8")).hexdigest() == code.strip().lower()
    return ResetConfig(info, data.get(KEY_RESTART_TYPE), ok, unknown)


# ---------------------------------------------------------------------- what the engine asks the writer for

POD_RESCHEDULING_LABEL = "pod-rescheduling"
PROCESS_RECOVER_LABEL = "process-recover-enable"
SUB_HEALTHY_LABEL = "subHealthyStrategy"
GRACE_EXIT_STRATEGY = "graceExit"
CHANGE_POD_RESCHEDULE = "pod-reschedule"
CHANGE_GRACE_EXIT_ON = "grace-exit-on"
CHANGE_GRACE_EXIT_OFF = "grace-exit-off"
CHANGES = (CHANGE_POD_RESCHEDULE, CHANGE_GRACE_EXIT_ON, CHANGE_GRACE_EXIT_OFF)


@dataclass(frozen=True, slots=True)
class ResetConfigUpdate:
    """One update of a job's ``reset-config-<job>``, as plain data: what the engine hands the writer port
    (agent.engine.ports) and unit tests compare.

    Attributes:
        namespace, job_name: the job's (the ConfigMap is ``reset-config-<job_name>`` in `namespace`).
        change: :data:`CHANGE_POD_RESCHEDULE` (:func:`after_pods_placed`), :data:`CHANGE_GRACE_EXIT_ON` or
            :data:`CHANGE_GRACE_EXIT_OFF` (:func:`with_graceful_exit`).
        pod_level: for the pod-level change: only some of the job's pods were rescheduled (``RetryTime`` + 1),
            else the whole job was (``RetryTime`` 0).
        now_s: for the pod-level change: ``UpdateTime``, unix seconds.
        since_s: for the pod-level change: the restart's time, unix seconds (0: none). Data already holding a
            pod-level update newer than it is this restart's, written by a leader that died before recording it:
            not written again (``RetryTime`` would count twice and the processes restart twice).
    """

    namespace: str
    job_name: str
    change: str
    pod_level: bool = False
    now_s: int = 0
    since_s: int = 0

    def __post_init__(self) -> None:
        if self.change not in CHANGES:
            raise ValueError(f"change must be one of {', '.join(CHANGES)}, got {self.change!r}")

    @property
    def name(self) -> str:
        """The ConfigMap's name, ``reset-config-<job>``."""
        return reset_config_name(self.job_name)


def updated_data(update: ResetConfigUpdate, data: Mapping[str, str]) -> dict[str, str] | None:
    """The ConfigMap's whole new ``data`` for `update` applied to its current `data`, or None when the graceful
    exit change finds ``GracefulExit`` already at its value (nothing to write: safe to repeat). The pod-level
    change writes unless the data holds a pod-level update (``restartType: podReschedule``) with an
    ``UpdateTime`` after `update.since_s` (this restart's, already written); its ``RetryTime`` counts, and the
    caller's resourceVersion precondition keeps a retried write from counting twice.

    Raises:
        ResetConfigError: the current data cannot be read (:func:`parse_reset_config`).
        ValueError: a negative `now_s` for the pod-level change.
    """
    current = parse_reset_config(data)
    if update.change == CHANGE_POD_RESCHEDULE:
        if update.since_s and current.restart_type == POD_RESCHEDULE and current.info.update_time > update.since_s:
            return None
        info = after_pods_placed(current.info, now_s=update.now_s, pod_level=update.pod_level)
        return reset_config_data(info, restart_type=POD_RESCHEDULE)
    on = update.change == CHANGE_GRACE_EXIT_ON
    wanted = GRACEFUL_EXIT_ON if on else GRACEFUL_EXIT_OFF
    if current.info.graceful_exit == wanted and current.check_code_ok is not False and KEY_RESTART_TYPE not in data:
        return None
    return reset_config_data(with_graceful_exit(current.info, on=on), restart_type=None)


def pod_level_update_wanted(labels: Mapping[str, str]) -> bool:
    """Whether MindCluster's plugin rewrites the job's reset-config once its pods are placed again: label
    ``pod-rescheduling: on`` and not ``process-recover-enable: on`` (plugin/job.go ``updateResetConfigMap``)."""
    return labels.get(POD_RESCHEDULING_LABEL) == "on" and labels.get(PROCESS_RECOVER_LABEL) != "on"


def grace_exit_wanted(labels: Mapping[str, str]) -> bool:
    """Whether a sub-health restart of the job sets ``GracefulExit`` first: ``subHealthyStrategy: graceExit``
    and not ``process-recover-enable: on`` (internal/rescheduling/job.go ``deleteJobWithSubHealthyLabels``)."""
    return labels.get(SUB_HEALTHY_LABEL) == GRACE_EXIT_STRATEGY and labels.get(PROCESS_RECOVER_LABEL) != "on"


def reset_config_reason(labels: Mapping[str, str]) -> str | None:
    """Why a job with these labels needs a ``reset-config-<job>`` ConfigMap (a short phrase naming the label),
    or None when it needs none. Only opted-in jobs (``fault-scheduling`` ``grace`` or ``force``) are written."""
    if labels.get(FAULT_SCHEDULING_LABEL) not in ("grace", "force"):
        return None
    if pod_level_update_wanted(labels):
        return f"{POD_RESCHEDULING_LABEL}=on"
    if grace_exit_wanted(labels):
        return f"{SUB_HEALTHY_LABEL}={GRACE_EXIT_STRATEGY}"
    return None


def initial_reset_config(job_name: str, namespace: str) -> dict[str, Any]:
    """The ``reset-config-<job>`` ConfigMap a platform creates with the job (API wire form): label
    ``reset: "true"``, ``reset.json`` = Go's marshal of the zero ``TaskResetInfo`` (``RankList`` null, every
    count 0), ``checkCode`` its SHA-256. Every reader (the plugin, the device plugin's
    ``WriteResetInfoDataIntoCM``, TaskD's ``fault_check.py``) reads it as "nothing to do"."""
    info = ResetInfo()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": reset_config_name(job_name), "namespace": namespace, "labels": dict([RESET_LABEL])},
        "data": reset_config_data(info, restart_type=None),
    }
