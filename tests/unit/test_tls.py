"""The run's CA and the certificates ``bootstrap.tls`` makes, checked by a real handshake
on 127.0.0.1: the dispatcher's certificate as an agent verifies it (its context made as
``bootstrap/agent.py`` makes it, with ``VERIFY_X509_STRICT``, which Python 3.13's
``create_default_context`` sets), the service's self-signed one pinned as its own CA;
keys mode 0600, files replaced whole."""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from autoscaler.bootstrap.tls import (
    CA_CERT,
    CA_KEY,
    SERVER_CERT,
    SERVER_KEY,
    run_ca,
    self_signed,
)


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> bytes:
    """What a server with context ``server`` on 127.0.0.1 (in a thread) sends a client
    with context ``client`` that asks for 127.0.0.1; SSLError if the client refuses it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            conn.settimeout(10)
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError):
                pass  # the client refused the certificate: it says so
            finally:
                conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
            ):
                return tls.recv(2)
        finally:
            thread.join(10)


def agent_context(ca_file: Path, *, strict: bool = True) -> ssl.SSLContext:
    """A context as the agent's (``Agent._pinned``: only the run's CA), strict as from
    Python 3.13 or not as before it, whatever this interpreter's default."""
    context = ssl.create_default_context(cafile=str(ca_file))
    if strict:
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    else:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def test_an_agent_with_strict_verification_accepts_the_dispatchers_certificate(
    tmp_path: Path,
) -> None:
    """The first start's certificate, and a resumed run's (issued by the CA it keeps)."""
    first = run_ca(tmp_path, ["10.0.0.2"])
    assert handshake(first.context(), agent_context(tmp_path / CA_CERT)) == b"ok"
    resumed = run_ca(tmp_path, ["10.0.0.3"])
    assert resumed.ca_pem == first.ca_pem
    assert handshake(resumed.context(), agent_context(tmp_path / CA_CERT)) == b"ok"


def test_the_self_signed_certificate_pinned_as_its_ca_passes_strict_verification(
    tmp_path: Path,
) -> None:
    cert, key = tmp_path / "api-cert.pem", tmp_path / "api-key.pem"
    self_signed(cert, key, ["10.0.0.2"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    assert handshake(server, agent_context(cert)) == b"ok"


def test_keys_are_written_whole_and_readable_by_the_owner_only(tmp_path: Path) -> None:
    """Mode 0600 even where a wider file was before (replaced, not rewritten in place);
    no temporary file left beside them."""
    (tmp_path / SERVER_KEY).write_text("an older key\n")
    (tmp_path / SERVER_KEY).chmod(0o644)
    run_ca(tmp_path, ["10.0.0.2"])
    api = tmp_path / "api"
    api.mkdir()
    self_signed(api / "api-cert.pem", api / "api-key.pem", ["10.0.0.2"])
    for key in (tmp_path / CA_KEY, tmp_path / SERVER_KEY, api / "api-key.pem"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
        assert serialization.load_pem_private_key(key.read_bytes(), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["api", CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY]
    )
    assert sorted(p.name for p in api.iterdir()) == ["api-cert.pem", "api-key.pem"]


def test_a_ca_made_without_a_key_identifier_is_kept_for_the_agents_pinning_it(
    tmp_path: Path,
) -> None:
    """A run resumed across the upgrade keeps its CA (no Subject Key Identifier, as
    older versions made it): its agents, which verify as before, still accept the
    dispatcher (whose Authority Key Identifier that CA has no identifier to match)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "autoscaler run CA old")])
    now = datetime.datetime.now(datetime.UTC)
    old = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = old.public_bytes(serialization.Encoding.PEM)
    (tmp_path / CA_CERT).write_bytes(pem)
    (tmp_path / CA_KEY).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files = run_ca(tmp_path, ["10.0.0.2"])
    assert files.ca_pem.encode("ascii") == pem
    client = agent_context(tmp_path / CA_CERT, strict=False)
    assert handshake(files.context(), client) == b"ok"
