"""The bearer-token check shared by the service's API and the agents' dispatcher."""

from __future__ import annotations

import hmac

BEARER = "Bearer "


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for any other."""
    if authorization is None or not authorization.startswith(BEARER):
        return None
    return authorization.removeprefix(BEARER).strip()


def token_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (no timing oracle)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
