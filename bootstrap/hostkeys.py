"""Host keys of the machines we reach over SSH: checked per machine id, never blindly.

We never read ``~/.ssh/known_hosts`` and never add keys blindly (fabric's default
``AutoAddPolicy`` is replaced). Keys are checked per MACHINE ID, not per address: cloud
addresses get reused by other machines, and in tests (or behind a forward) several
machines share one address. Two policies:

* ``"pinned"`` (trust on first use): the first connection to a machine, right after its
  launch, records the key it offers in the run's ``known_hosts`` file (paramiko's
  HostKeys format with the machine id as the host name, mode 0600, replaced atomically).
  Every later connection to that machine, from this daemon or a restarted one, must offer
  the same key, else :class:`HostKeyMismatch`. The window of trust is the first
  connection only.
* ``"console"``: the key offered must be one of those the machine printed on its console
  (cloud-init writes them between ``-----BEGIN SSH HOST KEY KEYS-----`` and
  ``-----END SSH HOST KEY KEYS-----``; see :func:`parse_console_host_keys`). The console
  output comes from the provider's API, not from the network path to the machine, so no
  first use is trusted. The console appears minutes after boot: until it lists keys we
  retry with backoff for ``console_wait_s``, then fail. A key so verified is pinned too,
  so later connections do not depend on the console (which EC2 truncates).

A mismatch names the machine, its address and both fingerprints (SHA256, as
``ssh-keygen -l`` prints them), never key material. The private key file is only handed
to paramiko by path; it is never read, logged or copied here.
"""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry

from autoscaler.bootstrap.agent_start import BootstrapError
from autoscaler.core.atomic import write_atomic

BEGIN_KEYS = "-----BEGIN SSH HOST KEY KEYS-----"
END_KEYS = "-----END SSH HOST KEY KEYS-----"

_KEY_TYPE_RE = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+")


class HostKeyMismatch(BootstrapError):
    """A machine offered a host key other than the one we trust for it."""

    code = "HostKeyMismatch"


def parse_console_host_keys(text: str) -> list[str]:
    """The ``"<type> <base64>"`` host keys listed in a machine's console output.

    cloud-init prints the keys between ``-----BEGIN SSH HOST KEY KEYS-----`` and
    ``-----END SSH HOST KEY KEYS-----``, one ``type base64 [comment]`` per line; lines may
    carry a prefix (a timestamp, ``ec2:``) that is ignored, as are comments. The
    fingerprint block cloud-init also prints (``BEGIN SSH HOST KEY FINGERPRINTS``) is not
    a key list and is skipped. Keys that are not valid base64 are dropped, and so is a
    block without its END line (console output cut short could cut a key short). If the
    block appears more than once (a reboot), every listed key is returned, once.
    """
    keys: list[str] = []
    block: list[str] | None = None  # the keys of the block being read
    for raw in text.splitlines():
        line = raw.strip()
        if line.endswith(BEGIN_KEYS):
            block = []
        elif line.endswith(END_KEYS):
            for key in block or ():
                if key not in keys:
                    keys.append(key)
            block = None
        elif block is not None:
            found = _key_in(line)
            if found is not None:
                block.append(found)
    return keys


def _key_in(line: str) -> str | None:
    """The ``"type base64"`` key on one console line, after any prefix, or None."""
    words = line.split()
    for i, word in enumerate(words[:-1]):
        if _KEY_TYPE_RE.fullmatch(word):
            blob = words[i + 1]
            try:
                base64.b64decode(blob, validate=True)
            except ValueError:
                return None
            return f"{word} {blob}"
    return None


def fingerprint(key: str | paramiko.PKey) -> str:
    """``SHA256:<unpadded base64>`` of a key, as ``ssh-keygen -l`` prints it.

    ``key`` is a ``"type base64 [comment]"`` line (a known_hosts or authorized_keys line
    without host names) or a paramiko key.
    """
    if isinstance(key, str):
        parts = key.split()
        if len(parts) < 2:
            raise ValueError(f"not a public key line: {key[:40]!r}")
        blob = base64.b64decode(parts[1])
    else:
        blob = key.asbytes()
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def _blob(key_line: str) -> bytes:
    return base64.b64decode(key_line.split()[1])


class KnownHosts:
    """The run's pinned keys: paramiko HostKeys format keyed by machine id, 0600."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def get(self, machine: str) -> list[paramiko.PKey]:
        with self._lock:
            return list(self._load().get(machine, {}).values())

    def pin(self, machine: str, key: paramiko.PKey) -> None:
        """Record ``key`` for ``machine`` (replacing any earlier pin), atomically."""
        with self._lock:
            hosts = self._load()
            entries = [
                HostKeyEntry([name], k)
                for name in hosts
                if name != machine
                for k in hosts[name].values()
            ]
            entries.append(HostKeyEntry([machine], key))
            text = "".join(entry.to_line() or "" for entry in entries)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, text, encoding="ascii", prefix=".known_hosts.")

    def _load(self) -> paramiko.HostKeys:
        hosts = paramiko.HostKeys()
        if self.path.exists():
            hosts.load(str(self.path))
        return hosts


class HostKeyCheck(paramiko.MissingHostKeyPolicy):
    """Pin-or-compare (or console-compare) for one machine.

    paramiko calls this for every connection because the client's own HostKeys is empty:
    the comparison by machine id is ours.
    """

    def __init__(
        self,
        known: KnownHosts,
        machine: str,
        address: str,
        console_keys: list[str] | None,
    ) -> None:
        self.known = known
        self.machine = machine
        self.address = address
        self.console_keys = console_keys
        self.accepted: str | None = None  # "pinned" / "matched pin" / "console"

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        offered = fingerprint(key)
        pinned = self.known.get(self.machine)
        if pinned:
            if any(p.asbytes() == key.asbytes() for p in pinned):
                self.accepted = "matched pin"
                return
            expected = ", ".join(fingerprint(p) for p in pinned)
            raise HostKeyMismatch(
                f"host key mismatch for machine {self.machine} at {self.address}: "
                f"it offered {key.get_name()} {offered}, expected {expected} "
                f"(pinned in {self.known.path})"
            )
        if self.console_keys is not None:
            if not any(_blob(line) == key.asbytes() for line in self.console_keys):
                expected = ", ".join(fingerprint(line) for line in self.console_keys)
                raise HostKeyMismatch(
                    f"host key mismatch for machine {self.machine} at {self.address}: "
                    f"it offered {key.get_name()} {offered}, not among the keys on its "
                    f"console: {expected}"
                )
            self.accepted = "console"
        else:
            self.accepted = "pinned"
        self.known.pin(self.machine, key)
