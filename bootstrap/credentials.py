"""What an agent presents to the dispatcher, derived from the run's secret.

The run's secret (the run directory's ``token``, mode 0600) never leaves the controller.
Each machine's agent holds its **machine token**, an HMAC of the secret and the machine
id: it authorises requests for that machine only (its polls, its task files), so one
machine's token cannot report for another or fetch its inputs. Nothing per machine is
stored: the dispatcher derives the token again from the machine id a request names, and
a restarted daemon derives the same tokens.

Where the machine id is not known when the agent's credential is written (EC2 user data:
one script for all the instances of one ``RunInstances``, written before EC2 names them)
the agent holds a **launch token** instead, ``<launch>.<HMAC of the secret and the
launch>``: it can only *register* an instance id of that launch, once, in exchange for
that instance's machine token (``POST /v1/register``, ``run.dispatch``).
"""

from __future__ import annotations

import hashlib
import hmac

_MACHINE = b"autoscaler machine\0"
_LAUNCH = b"autoscaler launch\0"


def machine_token(secret: str, machine: str) -> str:
    """The token of ``machine``'s agent."""
    return _mac(secret, _MACHINE + machine.encode())


def launch_token(secret: str, launch: str) -> str:
    """The token the agents of launch ``launch`` register their machines with."""
    return f"{launch}.{_mac(secret, _LAUNCH + launch.encode())}"


def launch_of(secret: str, token: str) -> str | None:
    """The launch whose token ``token`` is (checked in constant time); None if it is none."""
    launch, dot, mac = token.rpartition(".")
    if not dot or not launch:
        return None
    expected = _mac(secret, _LAUNCH + launch.encode())
    return launch if hmac.compare_digest(mac.encode(), expected.encode()) else None


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
