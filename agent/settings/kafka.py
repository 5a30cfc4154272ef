"""``kafka.*``: the broker, its security, the topics, the producer and the outbox."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from agent.settings.common import (
    HOST_PORTS,
    Group,
)


class KafkaSettings(Group):
    """Publishing events to Kafka: broker, security, topics, and the outbox that keeps events while Kafka is away."""

    enabled: bool = Field(True, description="Publish events to Kafka; off means the outbox only.")
    bootstrap_servers: str = Field("127.0.0.1:9092", description="Comma-separated host:port list.")

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str) -> str:
        if not HOST_PORTS.fullmatch(value):
            raise ValueError("expected host:port[,host:port...], e.g. 127.0.0.1:9092 or kafka-0:9092,kafka-1:9092")
        return value

    client_id: str = Field("fault-agent", description="Kafka client.id, visible in broker logs and quotas.")
    faults_topic: str = Field("training.faults", description="Topic for fault detected/cleared events.")
    recoveries_topic: str = Field("training.recoveries", description="Topic for recovery and breaker events.")
    create_topics: bool = Field(
        False, description="Create missing topics at start; off in production where topics are managed."
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka security.protocol."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="SASL mechanism when security_protocol is SASL_*."
    )
    sasl_username: str | None = Field(None, description="SASL user name.")
    sasl_password: str | None = Field(None, description="SASL password (prefer an env var from a Secret).")
    ssl_cafile: str | None = Field(
        None,
        description="PEM file of the CA certificates that signed the brokers' certificates (security_protocol SSL or "
        "SASL_SSL); unset: the system's CAs. The chart's kafkaTLS values mount it from a Secret and set it.",
    )
    ssl_certfile: str | None = Field(
        None,
        description="PEM file of the client certificate (and its chain) for brokers that require TLS client "
        "authentication; unset: none is sent.",
    )
    ssl_keyfile: str | None = Field(
        None,
        description="PEM file of the client certificate's private key, unencrypted; unset: the key is in ssl_certfile.",
    )
    ssl_check_hostname: bool = Field(
        True,
        description="Check that a broker's certificate names the host the agent connects to (the bootstrap "
        "address, then the advertised one). Turn off only for brokers whose certificates cannot carry their "
        "addresses; the certificate is still verified against the CA.",
    )
    linger_ms: int = Field(
        0,
        ge=0,
        le=1000,
        description="The aiokafka producer's batching delay, ms. 0: a batch goes out as soon as the broker "
        "connection is free, and events arriving while a request is in flight fill the next batch (batches are as "
        "large as the backlog); more only delays every event by that much.",
    )
    compression_type: Literal["gzip", "snappy", "lz4", "zstd"] | None = Field(
        "gzip", description="Producer compression; gzip needs no extra native library."
    )
    queue_size: int = Field(
        10000,
        ge=10,
        le=1_000_000,
        description="Events handed to the producer (or waiting for it) and not yet acknowledged; beyond it "
        "publishers wait up to 1 s for room, then the outbox replays.",
    )
    outbox_dir: str = Field(
        "/var/lib/fault-agent/outbox",
        description="Durable on-disk outbox (a PVC in deploy/). Every event is written and fsync'd here before the "
        "agent treats it as sent or acts on the step it describes, whatever Kafka does; group commit adds no delay "
        "of its own: an event is on disk within two write + fsync rounds (publish() p99 42 ms on the project's "
        "2-core machine at load average 16; fsync p99 15 ms at load 3).",
    )
    outbox_peers_dir: str = Field(
        "",
        description="A directory whose subdirectories are the outboxes of this agent's other processes (deploy/: "
        "one per pod on the shared volume, kafka.outbox_dir inside it). At start, each one no live process holds is "
        "taken over: its events are moved to this process's outbox, in order, and sent, and it is deleted; a running "
        "process looks again every kafka.outbox_adopt_interval_s, so the events a replica that died had accepted "
        "are sent by a live one within that interval (a process still stopping holds its outbox). The volume must "
        "honour flock across nodes (NFSv4, CephFS; not NFS mounted with nolock or local_lock). Empty: none.",
    )
    outbox_adopt_interval_s: float = Field(
        5.0,
        ge=0,
        le=3600,
        description="While running, how often the outboxes under kafka.outbox_peers_dir are looked at again: one no "
        "live process holds (a replica that died while this one runs) is taken over through this process's own "
        "commit path and sent. 5 s keeps a dead leader's events ahead of its successor's (whose term opens a "
        "Lease duration, 15 s, after the dead leader's last renewal). A dead replica's undelivered events reach "
        "Kafka within this + 10 s of Kafka being reachable after the death (the soak checks it). 0: only at start.",
    )
    flush_deadline_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="On shutdown, seconds to wait for deliveries; what is left stays in the outbox for the next start.",
    )
    outbox_max_bytes: int = Field(
        1024**3,
        ge=1024 * 1024,
        le=1024**4,
        description="Outbox size limit, bytes; beyond it new events are dropped (logged and counted). "
        "1 GiB holds about a million events.",
    )
    request_timeout_ms: int = Field(
        10000,
        ge=1000,
        le=300000,
        description="Producer request timeout; a batch not acknowledged in this time fails and is replayed "
        "from the outbox. 10 s instead of the client's 40 s so an outage is noticed sooner.",
    )
    spill_after_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Events not acknowledged by Kafka within this many seconds are replayed from the outbox, with "
        "everything queued behind them (they are on disk already); 5 s is well above a healthy broker's acks=all "
        "latency.",
    )
    max_batch_bytes: int = Field(
        262144, ge=16384, le=16 * 1024 * 1024, description="Producer batch size per partition, bytes."
    )
    replay_batch: int = Field(
        2000, ge=1, le=100000, description="Outbox events sent per replay round before the outbox cursor moves."
    )
    topic_partitions: int = Field(6, ge=1, le=10000, description="Partitions of topics the agent creates.")
    topic_replication_factor: int = Field(
        3, ge=1, le=16, description="Replication factor of topics the agent creates (1 on a one-broker testbed)."
    )
