"""Agent settings: defaults < YAML file < environment (`FAULT_AGENT_`, nested with `__`).

Example: ``FAULT_AGENT_KAFKA__BOOTSTRAP_SERVERS=127.0.0.1:9092`` sets ``kafka.bootstrap_servers``.
The YAML file is given by ``--config`` or ``FAULT_AGENT_CONFIG``; ``config/agent.yaml`` documents every default.

One module per group (``kube``, ``kafka``, ``detect``, ``policy``, ``service`` for server/leader/log, ``record``,
``prometheus``), the root :class:`Settings` composing them (``root``) and :func:`load_settings` (``loading``);
callers import from here. The package imports nothing of the agent (an import-linter contract).
"""

from agent.settings.common import CONFIG_ENV, ENV_PREFIX, SettingsError
from agent.settings.detect import DetectSettings
from agent.settings.kafka import KafkaSettings
from agent.settings.kube import KubeSettings
from agent.settings.loading import NOT_SETTINGS, REMOVED_SETTINGS, load_settings, nearest_setting
from agent.settings.policy import PolicySettings
from agent.settings.prometheus import PrometheusSettings
from agent.settings.record import RecordSettings
from agent.settings.root import Settings
from agent.settings.service import LeaderSettings, LogSettings, ServerSettings

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "NOT_SETTINGS",
    "REMOVED_SETTINGS",
    "DetectSettings",
    "KafkaSettings",
    "KubeSettings",
    "LeaderSettings",
    "LogSettings",
    "PolicySettings",
    "PrometheusSettings",
    "RecordSettings",
    "ServerSettings",
    "Settings",
    "SettingsError",
    "load_settings",
    "nearest_setting",
]
