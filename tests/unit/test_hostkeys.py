"""Host keys from EC2 console output, and fingerprints as ssh-keygen prints them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from autoscaler.bootstrap.hostkeys import fingerprint, parse_console_host_keys

DATA = Path(__file__).parent / "data"


def capture() -> str:
    return (DATA / "console_cloudinit.txt").read_text()


def printed_fingerprints(text: str) -> dict[str, str]:
    """Key type -> fingerprint, from the FINGERPRINTS block cloud-init printed (plain one)."""
    out = {}
    for line in text.splitlines():
        match = re.search(r"cloud-init: \d+ (SHA256:\S+) .* \((\w+)\)$", line)
        if match:
            out[match.group(2)] = match.group(1)
    return out


def test_parses_the_keys_block_and_nothing_else() -> None:
    """Only the three key lines between BEGIN/END SSH HOST KEY KEYS, comments dropped."""
    keys = parse_console_host_keys(capture())
    assert [key.split()[0] for key in keys] == ["ecdsa-sha2-nistp256", "ssh-ed25519", "ssh-rsa"]
    assert all(len(key.split()) == 2 for key in keys)
    assert all(key in capture() for key in keys)


def test_parsed_keys_match_the_fingerprints_cloud_init_printed() -> None:
    """Our fingerprint of each parsed key equals the one in the console's FINGERPRINTS block."""
    printed = printed_fingerprints(capture())
    names = {"ecdsa-sha2-nistp256": "ECDSA", "ssh-ed25519": "ED25519", "ssh-rsa": "RSA"}
    keys = parse_console_host_keys(capture())
    assert {names[key.split()[0]]: fingerprint(key) for key in keys} == printed


def test_console_without_keys_or_with_a_cut_block_gives_none() -> None:
    """No block yet, only the fingerprint block, or a block cut before its END: no keys."""
    text = capture()
    before = text[: text.index("-----BEGIN SSH HOST KEY KEYS-----")]
    assert parse_console_host_keys(before) == []
    cut = text[: text.index("-----END SSH HOST KEY KEYS-----")]
    assert parse_console_host_keys(cut) == []
    assert parse_console_host_keys("") == []


def test_prefixed_block_repeated_blocks_and_junk_lines() -> None:
    """ec2:-prefixed lines count; a repeated block (reboot) adds nothing twice; junk skipped."""
    key = capture().split("ssh-ed25519 ", 1)[1].split()[0]
    text = (
        "ec2: -----BEGIN SSH HOST KEY KEYS-----\n"
        f"ec2: ssh-ed25519 {key} root@host\n"
        "ec2: ssh-ed25519 not*base64 root@host\n"
        "ec2: some noise in between\n"
        "ec2: -----END SSH HOST KEY KEYS-----\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"ssh-ed25519 {key}\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )
    assert parse_console_host_keys(text) == [f"ssh-ed25519 {key}"]


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    """fingerprint() of a key line and of the paramiko key equal ``ssh-keygen -lf``'s."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    for kind in ("ed25519", "ecdsa", "rsa"):
        path = tmp_path / f"key_{kind}"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "c", "-f", str(path)], check=True
        )
        listed = subprocess.run(
            ["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        line = path.with_suffix(".pub").read_text()
        assert fingerprint(line) == listed
        pkey = paramiko.PKey.from_path(path)
        assert fingerprint(pkey) == listed


def test_fingerprint_refuses_a_non_key() -> None:
    with pytest.raises(ValueError, match="not a public key line"):
        fingerprint("garbage")
