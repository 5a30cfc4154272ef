"""Certificates for the testbed's Kafka TLS listener, made with openssl: a CA of their own, the broker's
certificate (for 127.0.0.1 and localhost) and a client certificate the broker requires (mutual TLS).

Made once per testbed folder (``<testbed>/kafka-pki/``) and reused on restarts; tests make more in folders of
their own (a second CA, to see a broker refused). The broker reads PEM files (``ssl.keystore.type=PEM``): its key
and certificate in one file, the CA as its trust store for client certificates.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class PkiError(Exception):
    """openssl is missing or one of its steps failed; the message names the step and openssl's error."""


@dataclass(frozen=True)
class KafkaPki:
    """Paths of one Kafka PKI folder."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def broker_keystore(self) -> Path:
        """The broker's private key (PKCS#8) followed by its certificate: Kafka's PEM key store."""
        return self.directory / "broker-keystore.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"


def make_kafka_pki(directory: Path, *, cn: str = "fault-agent-testbed-kafka-ca") -> KafkaPki:
    """A CA named `cn`, a broker certificate for ``IP:127.0.0.1`` and ``DNS:localhost`` and a client certificate
    (``CN=fault-agent``), all signed by the CA, in `directory` (made when missing; files already there are kept,
    so a restarted testbed keeps its certificates). Keys are unencrypted 2048-bit RSA.

    Raises:
        PkiError: openssl is not installed or a step failed.
    """
    pki = KafkaPki(directory)
    if pki.broker_keystore.exists() and pki.client_key.exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PkiError("openssl is not installed (Debian: apt-get install -y openssl)")

    def run(*args: str) -> None:
        res = subprocess.run([openssl, *args], cwd=directory, capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise PkiError(f"openssl {' '.join(args[:2])} in {directory} failed: {res.stderr.strip()}")

    days = "3650"
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", days,
        "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    (directory / "broker.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nauthorityKeyIdentifier=keyid\n",
        encoding="utf-8",
    )
    (directory / "client.ext").write_text(
        "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "authorityKeyIdentifier=keyid\n",
        encoding="utf-8",
    )
    for name, subject in (("broker", "/CN=localhost"), ("client", "/CN=fault-agent")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", days, "-extfile", f"{name}.ext")  # fmt: skip
    keystore = (directory / "broker.key").read_text(encoding="ascii") + (directory / "broker.crt").read_text(
        encoding="ascii"
    )
    if "BEGIN PRIVATE KEY" not in keystore:  # Kafka's PEM key store reads PKCS#8 only
        raise PkiError(f"openssl wrote no PKCS#8 key in {directory / 'broker.key'}")
    pki.broker_keystore.write_text(keystore, encoding="ascii")
    return pki
