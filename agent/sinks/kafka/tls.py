"""The TLS side of the Kafka connection (security_protocol SSL or SASL_SSL): the client context built from the
``kafka.ssl_*`` settings, and a probe that names why a broker refused the handshake (aiokafka only says "Unable to
bootstrap"). Errors are :class:`~agent.sinks.kafka.errors.KafkaSinkError`: ``config`` (not retriable) for a file
that cannot work, ``auth`` (retriable) for a handshake the broker or this side refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

from agent.settings import KafkaSettings
from agent.sinks.kafka.errors import ErrorReason, KafkaSinkError


def _setting(name: str) -> str:
    """``kafka.<name> [FAULT_AGENT_KAFKA__<NAME>]``: how an error names a Kafka setting."""
    return f"kafka.{name} [FAULT_AGENT_KAFKA__{name.upper()}]"


def _encrypted_key() -> bytes:
    raise ValueError("the key is encrypted; the agent reads an unencrypted PEM key")


def _config_error(message: str) -> KafkaSinkError:
    return KafkaSinkError(ErrorReason.CONFIG, message, retriable=False)


def tls_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The client TLS context of `settings` (security_protocol SSL or SASL_SSL): the brokers' certificates verified
    against ``ssl_cafile`` (else the system's CAs), their host names checked unless ``ssl_check_hostname`` is off,
    and the client certificate ``ssl_certfile`` with its key ``ssl_keyfile`` presented when set.

    Raises:
        KafkaSinkError: (config, not retriable) one line naming the setting and its file: a file that is missing,
            unreadable or not what the setting needs (no PEM certificate, an encrypted key, a key that does not
            match the certificate), or ``ssl_keyfile`` without ``ssl_certfile``.
    """
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(settings, name)
        if not path:  # unset (an empty value too)
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as e:
            raise _config_error(f"{_setting(name)}: cannot read {path}: {e.strerror or e}") from e
    if settings.ssl_keyfile and not settings.ssl_certfile:
        raise _config_error(
            f"{_setting('ssl_keyfile')} is {settings.ssl_keyfile} but {_setting('ssl_certfile')} is not set: "
            "a client key needs its certificate"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, host names checked
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.ssl_cafile:
        try:
            ctx.load_verify_locations(cafile=settings.ssl_cafile)
        except (ssl.SSLError, ValueError) as e:
            raise _config_error(
                f"{_setting('ssl_cafile')}: {settings.ssl_cafile} holds no usable PEM CA certificate ({_ssl_reason(e)})"
            ) from e
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.ssl_certfile:
        files = f"{settings.ssl_certfile}" + (f" and {settings.ssl_keyfile}" if settings.ssl_keyfile else "")
        names = _setting("ssl_certfile") + (f" / {_setting('ssl_keyfile')}" if settings.ssl_keyfile else "")
        try:
            ctx.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile or None, password=_encrypted_key)
        except (ssl.SSLError, ValueError) as e:
            raise _config_error(
                f"{names}: {files} hold no usable PEM client certificate and matching key ({_ssl_reason(e)})"
            ) from e
    ctx.check_hostname = settings.ssl_check_hostname
    return ctx


def _ssl_reason(err: BaseException) -> str:
    """OpenSSL's short reason (``KEY_VALUES_MISMATCH``, ``NO_CERTIFICATE_OR_CRL_FOUND``), else the message."""
    reason = getattr(err, "reason", None)
    return str(reason) if reason else str(err)


def _host_ports(bootstrap: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (``[IPv6]:port`` too) as (host, port) pairs."""
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


async def tls_problem(settings: KafkaSettings, ctx: ssl.SSLContext, wait_s: float = 5.0) -> KafkaSinkError | None:
    """Why the TLS handshake with the first bootstrap broker that accepts a TCP connection fails, or None when it
    does not (or none accepts one). aiokafka reports a refused certificate only as "Unable to bootstrap"; this
    names the cause: a broker certificate the CA does not sign, one that does not name the host, or a client
    certificate the broker refuses or wanted and did not get. Takes at most `wait_s` seconds in all."""
    deadline = asyncio.get_running_loop().time() + wait_s
    for host, port in _host_ports(settings.bootstrap_servers):
        try:
            async with asyncio.timeout_at(deadline):
                reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
        except ssl.SSLError as e:
            return _tls_error(settings, host, port, e)
        except TimeoutError:
            return None  # no time left: aiokafka's own error stands
        except OSError:
            continue  # not reachable: aiokafka's own error says so
        try:
            # TLS 1.3: a broker refuses the client certificate (or its absence) after the handshake, with an alert
            # or by closing the connection, seen on the first read; a Kafka broker itself sends nothing unasked.
            async with asyncio.timeout_at(min(deadline, asyncio.get_running_loop().time() + 1.0)):
                if await reader.read(1) == b"":
                    return _tls_error(settings, host, port, ssl.SSLError("connection closed after the handshake"))
        except ssl.SSLError as e:
            return _tls_error(settings, host, port, e)
        except ConnectionError:
            return _tls_error(settings, host, port, ssl.SSLError("connection reset after the handshake"))
        except (OSError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        return None
    return None


def _tls_error(settings: KafkaSettings, host: str, port: int, err: ssl.SSLError) -> KafkaSinkError:
    detail = getattr(err, "verify_message", None) or _ssl_reason(err)
    if isinstance(err, ssl.SSLCertVerificationError):
        if "hostname" in str(err).lower() or "ip address mismatch" in str(err).lower():
            hint = f"the broker's certificate does not name {host} (see {_setting('ssl_check_hostname')})"
        else:
            ca = settings.ssl_cafile or "the system's CAs"
            hint = f"the broker's certificate is not signed by a CA in {_setting('ssl_cafile')} ({ca})"
        message = f"TLS handshake with {host}:{port} failed: certificate verify failed: {detail}; {hint}"
    elif "certificate" in str(err).lower() or "after the handshake" in str(err):  # refused: an alert, EOF or RST
        message = (
            f"TLS handshake with {host}:{port} failed: the broker refused the client certificate ({detail}; "
            f"{_setting('ssl_certfile')} is {settings.ssl_certfile or 'not set'}: it must be signed by a CA the "
            "broker trusts)"
        )
    else:
        message = f"TLS handshake with {host}:{port} failed: {detail} (is it a TLS listener?)"
    return KafkaSinkError(ErrorReason.AUTH, message, retriable=True)
