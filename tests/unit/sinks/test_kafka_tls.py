"""Kafka over TLS, the client side: the TLS context the settings make (CA, client certificate, host name check),
one clear line for a CA, certificate or key file that is missing or unusable, and the handshake diagnosis that
names a refused broker certificate instead of aiokafka's "Unable to bootstrap". Certificates are made with openssl
(testbed/tls.py); the broker side is an in-process TLS server. Against the testbed's real broker:
tests/integration/test_kafka_publish.py."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.settings import KafkaSettings
from agent.sinks.kafka import ErrorReason, KafkaSinkError, producer_options, tls_context, tls_problem
from testbed.tls import KafkaPki, make_kafka_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> KafkaPki:
    return make_kafka_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> KafkaPki:
    """A second CA (and its certificates) that signed nothing of `pki`'s."""
    return make_kafka_pki(tmp_path_factory.mktemp("other-pki"), cn="another-ca")


def tls(pki: KafkaPki, **kw: Any) -> KafkaSettings:
    base: dict[str, Any] = {
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca_cert),
        "ssl_certfile": str(pki.client_cert),
        "ssl_keyfile": str(pki.client_key),
    }
    return KafkaSettings(**(base | kw))


def test_ssl_settings_make_a_verifying_context(pki: KafkaPki) -> None:
    opts = producer_options(tls(pki))
    ctx = opts["ssl_context"]
    assert opts["security_protocol"] == "SSL"
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert ctx.check_hostname is True  # on by default
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "fault-agent-testbed-kafka-ca"),),)]


def test_hostname_check_can_be_turned_off_but_the_ca_still_counts(pki: KafkaPki) -> None:
    ctx = tls_context(tls(pki, ssl_check_hostname=False))
    assert ctx.check_hostname is False
    assert ctx.verify_mode is ssl.CERT_REQUIRED


def test_sasl_ssl_gets_both(pki: KafkaPki) -> None:
    opts = producer_options(
        tls(pki, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="p")
    )
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert isinstance(opts["ssl_context"], ssl.SSLContext)


def test_plaintext_ignores_the_files(tmp_path: Path) -> None:
    """The files are only read for SSL and SASL_SSL: a PLAINTEXT agent with stale paths still starts."""
    opts = producer_options(KafkaSettings(ssl_cafile=str(tmp_path / "absent.crt")))
    assert "ssl_context" not in opts


def test_empty_file_settings_are_unset() -> None:
    """An empty variable (FAULT_AGENT_KAFKA__SSL_CAFILE=) means the system's CAs and no client certificate."""
    ctx = tls_context(KafkaSettings(security_protocol="SSL", ssl_cafile="", ssl_certfile="", ssl_keyfile=""))
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert ctx.check_hostname is True


def _bad_files(pki: KafkaPki, tmp_path: Path) -> dict[str, tuple[dict[str, Any], str, str]]:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_text(
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + (pki.directory / "client.key").read_text().split("\n", 1)[1]
    )
    return {
        "ca-missing": ({"ssl_cafile": str(tmp_path / "absent-ca.crt")}, "kafka.ssl_cafile", "absent-ca.crt"),
        "ca-is-a-folder": ({"ssl_cafile": str(tmp_path)}, "kafka.ssl_cafile", str(tmp_path)),
        "ca-not-pem": ({"ssl_cafile": str(junk)}, "kafka.ssl_cafile", str(junk)),
        "cert-missing": ({"ssl_certfile": str(tmp_path / "absent.crt")}, "kafka.ssl_certfile", "absent.crt"),
        "key-missing": ({"ssl_keyfile": str(tmp_path / "absent.key")}, "kafka.ssl_keyfile", "absent.key"),
        "key-without-cert": ({"ssl_certfile": None}, "kafka.ssl_certfile", str(pki.client_key)),
        "key-of-another-cert": ({"ssl_keyfile": str(pki.directory / "ca.key")}, "kafka.ssl_keyfile", "ca.key"),
        "key-encrypted": ({"ssl_keyfile": str(encrypted)}, "kafka.ssl_keyfile", str(encrypted)),
    }


@pytest.mark.parametrize(
    "case",
    [
        "ca-missing",
        "ca-is-a-folder",
        "ca-not-pem",
        "cert-missing",
        "key-missing",
        "key-without-cert",
        "key-of-another-cert",
        "key-encrypted",
    ],
)
def test_an_unusable_file_is_one_line_naming_the_setting_and_the_file(pki: KafkaPki, tmp_path: Path, case: str) -> None:
    update, setting, file = _bad_files(pki, tmp_path)[case]
    with pytest.raises(KafkaSinkError) as info:
        producer_options(tls(pki, **update))
    message = str(info.value)
    assert info.value.reason is ErrorReason.CONFIG
    assert info.value.retriable is False
    assert setting in message, message
    assert f"FAULT_AGENT_{setting.replace('.', '__').upper()}" in message, message
    assert file in message, message
    assert "\n" not in message


@contextlib.asynccontextmanager
async def tls_server(pki: KafkaPki, *, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """A TLS server with `pki`'s broker certificate that requires a client certificate `pki`'s CA signed (a
    stand-in for a broker's mutual-TLS listener) on `host`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.broker_keystore)
    ctx.load_verify_locations(pki.ca_cert)
    ctx.verify_mode = ssl.CERT_REQUIRED

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.read(1)
        writer.close()

    server = await asyncio.start_server(serve, host, 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{host}:{port}"
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)


async def test_handshake_with_the_right_files_has_no_problem(pki: KafkaPki) -> None:
    async with tls_server(pki) as address:
        s = tls(pki, bootstrap_servers=address)
        assert await tls_problem(s, tls_context(s)) is None


async def test_a_broker_certificate_from_another_ca_is_named(pki: KafkaPki, other_pki: KafkaPki) -> None:
    async with tls_server(pki) as address:
        s = tls(pki, bootstrap_servers=address, ssl_cafile=str(other_pki.ca_cert))
        problem = await tls_problem(s, tls_context(s))
    assert problem is not None
    assert problem.reason is ErrorReason.AUTH
    message = str(problem)
    assert f"TLS handshake with {address} failed: certificate verify failed" in message, message
    assert "kafka.ssl_cafile" in message, message
    assert str(other_pki.ca_cert) in message, message
    assert "\n" not in message


async def test_a_refused_client_certificate_is_named(pki: KafkaPki, other_pki: KafkaPki) -> None:
    """The broker requires a client certificate its CA signed: one of another CA (or none) is refused."""
    async with tls_server(pki) as address:
        s = tls(
            pki,
            bootstrap_servers=address,
            ssl_certfile=str(other_pki.client_cert),
            ssl_keyfile=str(other_pki.client_key),
        )
        problem = await tls_problem(s, tls_context(s))
        none = tls(pki, bootstrap_servers=address, ssl_certfile=None, ssl_keyfile=None)
        without = await tls_problem(none, tls_context(none))
    for p, cert in ((problem, str(other_pki.client_cert)), (without, "not set")):
        assert p is not None
        assert p.reason is ErrorReason.AUTH
        assert "the broker refused the client certificate" in str(p), str(p)
        assert f"kafka.ssl_certfile [FAULT_AGENT_KAFKA__SSL_CERTFILE] is {cert}" in str(p), str(p)


async def test_a_certificate_for_another_host_is_named(pki: KafkaPki) -> None:
    """The broker's certificate names 127.0.0.1 and localhost: reached as 127.0.0.2 (loopback too) it is refused
    while ssl_check_hostname is on, and the error says which host it does not name."""
    async with tls_server(pki, host="127.0.0.2") as address:
        s = tls(pki, bootstrap_servers=address)
        problem = await tls_problem(s, tls_context(s))
        off = s.model_copy(update={"ssl_check_hostname": False})
        assert await tls_problem(off, tls_context(off)) is None
    assert problem is not None
    assert problem.reason is ErrorReason.AUTH
    assert "does not name 127.0.0.2" in str(problem), str(problem)
    assert "kafka.ssl_check_hostname" in str(problem)


def test_testbed_env_names_the_tls_listener_and_its_files(tmp_path: Path) -> None:
    """`python -m testbed env` (and the state file) give a client what it needs for the broker's TLS listener."""
    from testbed.cluster import Testbed

    tb = Testbed(tmp_path)
    env = tb.env()
    assert env["KAFKA_TLS_BOOTSTRAP"] == f"127.0.0.1:{tb.ports.kafka_tls}"
    assert tb.ports.kafka_tls not in (0, tb.ports.kafka)
    assert env["KAFKA_TLS_CAFILE"] == str(tmp_path / "kafka-pki" / "ca.crt")
    assert env["KAFKA_TLS_CERTFILE"] == str(tmp_path / "kafka-pki" / "client.crt")
    assert env["KAFKA_TLS_KEYFILE"] == str(tmp_path / "kafka-pki" / "client.key")


async def test_the_handshake_diagnosis_is_bounded_in_time(pki: KafkaPki) -> None:
    """Brokers that accept TCP and never answer the handshake: the diagnosis gives up within its wait over all the
    bootstrap addresses together (aiokafka's own error then stands)."""
    silent: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        silent.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        s = tls(pki, bootstrap_servers=",".join([f"127.0.0.1:{port}"] * 3))
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await tls_problem(s, tls_context(s), wait_s=0.5) is None
        assert loop.time() - started < 1.5
    finally:
        for w in silent:
            w.close()
        server.close()
