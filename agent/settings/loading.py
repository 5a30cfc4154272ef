"""Loading the settings: defaults < YAML file < environment, with every bad setting named at once."""

from __future__ import annotations

import difflib
import json
import os
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError as PydanticSettingsError

from agent.settings.common import (
    CONFIG_ENV,
    ENV_PREFIX,
    SettingsError,
)
from agent.settings.root import Settings

# FAULT_AGENT_* variables that are not settings: the config file's path and the testbed's own variables.
NOT_SETTINGS = frozenset({CONFIG_ENV, "FAULT_AGENT_TESTBED_DIR", "FAULT_AGENT_TESTBED_CACHE"})


def _names_a_setting(parts: list[str]) -> bool:
    """Whether the levels `parts` (upper case, as in an environment variable) name a group or a setting."""
    model: type[BaseModel] | None = Settings
    for part in parts:
        if model is None:  # levels below a single setting
            return False
        field = {name.upper(): f for name, f in model.model_fields.items()}.get(part)
        if field is None:
            return False
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        elif get_origin(ann) is dict:
            return True  # a mapping setting: deeper levels are its keys
        else:
            model = None
    return True


def _unknown_environment() -> list[str]:
    """FAULT_AGENT_* variables that name no setting (a typo such as a single `_` between levels, a misspelled
    group or setting, or levels below a single setting)."""
    unknown = []
    for key in os.environ:
        if not key.startswith(ENV_PREFIX) or key in NOT_SETTINGS:
            continue
        if not _names_a_setting(key[len(ENV_PREFIX) :].split("__")):
            unknown.append(key)
    return sorted(unknown)


def _unknown_variable(key: str) -> str:
    """The problem line of a FAULT_AGENT_* variable that names no setting, with the nearest one when any."""
    dotted = ".".join(p.lower() for p in key[len(ENV_PREFIX) :].split("__"))
    if dotted in REMOVED_SETTINGS:
        return f"{key}: was replaced by {REMOVED_SETTINGS[dotted]}: the agent reads one fault source, never both"
    near = nearest_setting(dotted)
    hint = f"; did you mean {ENV_PREFIX + near.replace('.', '__').upper()} ({near})?" if near else ""
    return f"{key}: names no setting (levels are joined with '__'){hint}"


def _json_shape(ann: Any) -> str | None:
    """How a setting of type `ann` is written in the environment when it takes JSON there, else None."""
    if get_origin(ann) in (Union, types.UnionType):
        shapes = [_json_shape(a) for a in get_args(ann) if a is not type(None)]
        return next((shape for shape in shapes if shape is not None), None)
    if get_origin(ann) in (list, tuple, set, frozenset):
        return 'a JSON list, e.g. \'["a","b"]\''
    if get_origin(ann) is dict:
        return 'a JSON object, e.g. \'{"key":"value"}\''
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "a JSON object of its settings, or one variable per setting (levels joined with '__')"
    return None


def _unparsable_environment() -> dict[str, str]:
    """FAULT_AGENT_* variables of list, mapping or group settings whose value is not JSON, each with a problem
    line naming the variable and how to write it."""
    problems = {}
    for key, value in os.environ.items():
        if not key.startswith(ENV_PREFIX) or key in NOT_SETTINGS:
            continue
        model: type[BaseModel] = Settings
        parts = key[len(ENV_PREFIX) :].split("__")
        ann: Any = None
        for i, part in enumerate(parts):
            field = {name.upper(): f for name, f in model.model_fields.items()}.get(part)
            if field is None:
                ann = None  # names no setting: reported by _unknown_environment
                break
            ann = field.annotation
            if i < len(parts) - 1:
                if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                    ann = None  # a mapping's key, or levels below a single setting
                    break
                model = ann
        shape = _json_shape(ann)
        if shape is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            dotted = ".".join(p.lower() for p in parts)
            problem = f"{key}: setting {dotted!r} takes {shape}; got {value!r}, which is not JSON"
            if shape.startswith("a JSON list"):  # the likely intent: comma-separated items
                items = json.dumps([v.strip() for v in value.split(",") if v.strip()], separators=(",", ":"))
                problem += f" (write {key}='{items}')"
            problems[key] = problem
    return problems


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SettingsError(f"config file {path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise SettingsError(f"config file {path}: cannot read: {e.strerror or e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SettingsError(f"config file {path}: not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _all_setting_names() -> list[str]:
    """Every setting's dotted name (``policy.breaker_window_s``), groups first-level names included."""
    names: list[str] = []
    for name, info in Settings.model_fields.items():
        names.append(name)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names += [f"{name}.{sub}" for sub in ann.model_fields]
    return names


def nearest_setting(dotted: str) -> str | None:
    """The setting whose dotted name is closest to `dotted` (a typo in a file or a variable), or None when none is
    close. Compares within the same group first, then across all settings."""
    names = _all_setting_names()
    group, _, leaf = dotted.rpartition(".")
    if group:
        siblings = [n.rpartition(".")[2] for n in names if n.startswith(group + ".")]
        close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        if close:
            return f"{group}.{close[0]}"
    close = difflib.get_close_matches(dotted, names, n=1, cutoff=0.6)
    return close[0] if close else None


REMOVED_SETTINGS: dict[str, str] = {
    "kube.cluster_info_enabled": "kube.fault_source: clusterd (ClusterD's cluster-info-* alone) or auto",
    "kube.device_info_enabled": "kube.fault_source: per-node (the device plugin's and NodeD's ConfigMaps) or auto",
    "kube.node_info_enabled": "kube.fault_source: per-node (the device plugin's and NodeD's ConfigMaps) or auto",
}
"""Settings that were replaced (issue 36, item 7) → what to set instead; a file or variable still setting one is
refused with this hint."""


def _describe(err: ValidationError, origin: str) -> str:
    lines = []
    for item in err.errors():
        name = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden" and name in REMOVED_SETTINGS:
            lines.append(
                f"{name!r} was replaced by {REMOVED_SETTINGS[name]}: the agent reads one fault source, never both"
            )
            continue
        if item["type"] == "extra_forbidden":  # a typo: name the nearest setting, not a variable that does not exist
            near = nearest_setting(name)
            hint = f"; did you mean {near!r} [{ENV_PREFIX + near.replace('.', '__').upper()}]?" if near else ""
            lines.append(f"{name!r} names no setting{hint} (`fault-agent settings --defaults` lists them all)")
            continue
        env = ENV_PREFIX + "__".join(str(p) for p in item["loc"]).upper()
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"setting {name!r} [{env}]: {item['msg']}{shown}")
    return f"invalid settings{origin}:\n  " + "\n  ".join(lines)


def load_settings(config_file: str | os.PathLike[str] | None = None) -> Settings:
    """Load settings from defaults, then the YAML file, then `FAULT_AGENT_*` environment variables.

    Args:
        config_file: YAML path; when None, ``$FAULT_AGENT_CONFIG`` if set, else no file.

    Raises:
        SettingsError: unreadable or malformed file, or a value out of range; the message names each
            bad setting with its dotted name and environment variable.
    """
    path_text = config_file if config_file is not None else os.environ.get(CONFIG_ENV)
    data: dict[str, Any] = _read_yaml(Path(path_text)) if path_text else {}
    origin = f" (file {path_text} and environment)" if path_text else " (environment)"
    unknown = [_unknown_variable(key) for key in _unknown_environment()]
    unparsable = _unparsable_environment()
    unknown += [unparsable[key] for key in sorted(unparsable)]
    # FAULT_AGENT_CONFIG names the file, it is not a setting; unknown and unparsable variables are left out of
    # the model, so that the other values are still checked and every problem is reported at once.
    hidden = {
        key: os.environ.pop(key) for key in [CONFIG_ENV, *_unknown_environment(), *unparsable] if key in os.environ
    }
    try:
        settings = Settings(**data)
    except ValidationError as e:
        # every problem at once: the unknown variables and each bad value
        problems = "\n  ".join([*unknown, _describe(e, origin).split(":\n  ", 1)[1]])
        raise SettingsError(f"invalid settings{origin}:\n  {problems}") from e
    except PydanticSettingsError as e:
        # e.g. a list or group given as plain text: the environment needs JSON for those.
        raise SettingsError(
            f"invalid settings{origin}: {e}; list settings take JSON in the environment, "
            'e.g. FAULT_AGENT_KUBE__NAMESPACES=\'["train","eval"]\''
        ) from e
    finally:
        os.environ.update(hidden)
    if unknown:
        raise SettingsError("invalid settings (environment):\n  " + "\n  ".join(unknown))
    return settings
