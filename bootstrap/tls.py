"""Certificates for the controller's channels (``cryptography``, which fabric's paramiko
already brings).

* A run's own CA (``run_ca``): made at a run's first start in its run directory and kept
  (``ca.pem``, ``ca.key`` mode 0600), it issues the dispatcher's certificate for the
  addresses agents reach it at. Agents that connect directly (EC2 user data) pin the CA
  certificate, so a controller is trusted for that run only, whatever CAs the machine's
  image trusts. The dispatcher's certificate is issued again at every start (a resumed
  run's controller may be reached at another address); the CA stays.
* A self-signed certificate (``self_signed``) for the service's HTTPS API when the config
  names none, kept in the state directory; its SHA-256 ``fingerprint`` is what the
  command line pins.

Keys are EC P-256: a certificate of about 600 bytes, which user data (16 KB) can carry.

Strict verification (``VERIFY_X509_STRICT``, which ``ssl.create_default_context`` sets
from Python 3.13, as an agent's context is made) needs a CA certificate's Subject Key
Identifier and an issued certificate's Authority Key Identifier: both are there. Files
are replaced whole (``write_atomic``, mode 0600): a crash while one is written leaves the
old file or none, never half of one that every later start would refuse.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
SERVER_CERT = "dispatcher.pem"
SERVER_KEY = "dispatcher.key"
VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class ServerFiles:
    """A server's certificate chain and key on disk, and the CA certificate to pin."""

    cert_file: Path
    key_file: Path
    ca_pem: str

    def context(self) -> ssl.SSLContext:
        """The server side's TLS context."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def run_ca(folder: Path, hosts: Sequence[str]) -> ServerFiles:
    """The run's CA in ``folder`` (made on the first call) and a server certificate it
    issues for ``hosts`` (names or IP addresses; loopback added)."""
    ca_cert, ca_key = folder / CA_CERT, folder / CA_KEY
    if ca_cert.is_file() and ca_key.is_file():
        # Kept as it was made, even by a version before the Subject Key Identifier (a run
        # resumed across the upgrade): its agents pin it. Strict clients (Python >= 3.13)
        # refuse such a CA's chain; a new run makes a new CA.
        cert, key = _load_ca(ca_cert, ca_key)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, f"autoscaler run CA {folder.name}")]
        )
        cert = (
            _builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_ca_usage(), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        _write_key(ca_key, key)
        _write_cert(ca_cert, cert)
    server_key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autoscaler dispatcher")])
    server = (
        _builder(subject, cert.subject, server_key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_names(hosts), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(server_key.public_key()), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / SERVER_CERT, folder / SERVER_KEY
    _write_key(key_file, server_key)
    _write_cert(cert_file, server)
    return ServerFiles(cert_file, key_file, ca_cert.read_text(encoding="ascii"))


def _load_ca(ca_cert: Path, ca_key: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A run's CA as it was made; AutoscalerError naming the file that cannot be read
    (its agents pin this CA: a new one would not do)."""
    try:
        cert = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    except (OSError, ValueError) as exc:
        raise AutoscalerError(f"the run's CA certificate {ca_cert} cannot be read: {exc}") from None
    try:
        key = serialization.load_pem_private_key(ca_key.read_bytes(), None)
    except (OSError, ValueError, TypeError) as exc:
        raise AutoscalerError(f"the run's CA key {ca_key} cannot be read: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise AutoscalerError(f"the run's CA key {ca_key} is not an EC key")
    return cert, key


def self_signed(cert_file: Path, key_file: Path, hosts: Sequence[str]) -> None:
    """A self-signed server certificate for ``hosts`` (loopback added), written with its
    key (both mode 0600). Strict verification asks nothing more of a self-signed end
    entity certificate that is its own trust anchor."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autoscaler service")])
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_names(hosts), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_file, key)
    _write_cert(cert_file, cert)


@dataclass(frozen=True, slots=True)
class ServerCert:
    """A server's certificate and key on disk (the service's API)."""

    cert_file: Path
    key_file: Path

    @property
    def fingerprint(self) -> str:
        """The certificate's (the chain's first) SHA-256, as a client pins it."""
        return fingerprint(self.cert_file.read_bytes())


SELF_CERT = "api-cert.pem"
SELF_KEY = "api-key.pem"


def kept_self_signed(folder: Path, hosts: Sequence[str]) -> ServerCert:
    """The self-signed certificate kept in ``folder``, made on the first call."""
    held = ServerCert(folder / SELF_CERT, folder / SELF_KEY)
    if not (held.cert_file.is_file() and held.key_file.is_file()):
        self_signed(held.cert_file, held.key_file, hosts)
    return held


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 of a certificate's DER bytes, in hex: what a client pins."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys([*hosts, "localhost", "127.0.0.1", "::1"]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """``key`` in PEM (PKCS#8, unencrypted), replacing ``path`` whole (mode 0600 from
    the first byte: ``write_atomic``'s temporary file is made so)."""
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_atomic(path, data.decode("ascii"), encoding="ascii", prefix=f".{path.name}.")


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    """``cert`` in PEM, replacing ``path`` whole (mode 0600, as ``write_atomic`` makes
    every file: the agents that read it run as the controller's user)."""
    pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    write_atomic(path, pem, encoding="ascii", prefix=f".{path.name}.")
