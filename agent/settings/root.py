"""The root of the settings: one field per group, in the order config/agent.yaml and the chart's schema show."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agent.settings.common import (
    ENV_PREFIX,
)
from agent.settings.detect import DetectSettings
from agent.settings.kafka import KafkaSettings
from agent.settings.kube import KubeSettings
from agent.settings.policy import PolicySettings
from agent.settings.prometheus import PrometheusSettings
from agent.settings.record import RecordSettings
from agent.settings.service import LeaderSettings, LogSettings, ServerSettings


class Settings(BaseSettings):
    """All agent settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    cluster_name: str = Field("default", min_length=1, description="Cluster name used in event `source` and metrics.")
    kube: KubeSettings = Field(default_factory=KubeSettings)  # type: ignore[arg-type]
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)  # type: ignore[arg-type]
    detect: DetectSettings = Field(default_factory=DetectSettings)  # type: ignore[arg-type]
    policy: PolicySettings = Field(default_factory=PolicySettings)  # type: ignore[arg-type]
    server: ServerSettings = Field(default_factory=ServerSettings)  # type: ignore[arg-type]
    leader: LeaderSettings = Field(default_factory=LeaderSettings)  # type: ignore[arg-type]
    log: LogSettings = Field(default_factory=LogSettings)  # type: ignore[arg-type]
    record: RecordSettings = Field(default_factory=RecordSettings)  # type: ignore[arg-type]
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)  # type: ignore[arg-type]

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init (the YAML file's content, passed by load_settings) is the lowest priority after defaults;
        # the environment wins over the file.
        return (env_settings, init_settings)
