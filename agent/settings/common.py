"""What every settings group shares: the environment prefix, the error, the group base and the Kubernetes
name rules the validators use (k8s.io/apimachinery/pkg/util/validation)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

ENV_PREFIX = "FAULT_AGENT_"
CONFIG_ENV = "FAULT_AGENT_CONFIG"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# Kubernetes' object-name and label/taint-key rules (k8s.io/apimachinery/pkg/util/validation): a DNS-1123
# subdomain, and a qualified name (optional subdomain prefix, '/', a 1-63 character name)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def valid_object_name(value: str) -> str:
    """`value` if it is a valid Kubernetes object name (DNS-1123 subdomain, at most 253 characters)."""
    if len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError("an object name is a DNS-1123 subdomain: lower-case letters, digits, '-' and '.'")
    return value


def valid_taint_key(value: str) -> str:
    """`value` if it is a valid taint key (a qualified name: `[prefix/]name`, as label keys)."""
    prefix, _, name = value.rpartition("/")
    if not QUALIFIED_NAME.fullmatch(name) or (prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix))):
        raise ValueError(
            "a taint key is [prefix/]name: a DNS-1123 subdomain prefix and a 1-63 character name of letters, "
            "digits, '-', '_' and '.'"
        )
    return value


HOST_PORT = r"\s*(\[[0-9A-Fa-f:.]+\]|[^\s,:\[\]]+):\d{1,5}\s*"  # host:port, [IPv6]:port
HOST_PORTS = re.compile(f"{HOST_PORT}(,{HOST_PORT})*")


class SettingsError(Exception):
    """The settings could not be loaded. `str()` is one message naming each bad setting."""


class Group(BaseModel):
    """The base of every settings group (one field of :class:`agent.settings.Settings`): an unknown key is an
    error."""

    model_config = ConfigDict(extra="forbid")
