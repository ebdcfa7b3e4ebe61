"""Waits between tries of a machine that is not ready yet (SSH answering, host keys on
its console): exponential from ``BACKOFF_FIRST_S`` to ``BACKOFF_MAX_S``, cut to end at a
timeout."""

from __future__ import annotations

from typing import Any

from tenacity import RetryCallState, Retrying, retry_base, stop_after_delay, wait_exponential

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0


def is_none(value: object) -> bool:
    return value is None


def retrying(timeout_s: float, retry: retry_base) -> Retrying:
    """Tries again while ``retry`` says so of a try's result, for ``timeout_s``: waits
    from ``BACKOFF_FIRST_S`` doubling to ``BACKOFF_MAX_S``, the last cut to end at the
    timeout (so the last try comes then); gives the last try's result."""
    backoff = wait_exponential(multiplier=BACKOFF_FIRST_S, max=BACKOFF_MAX_S)

    def wait(state: RetryCallState) -> float:
        left = timeout_s - (state.seconds_since_start or 0.0)
        return max(0.0, min(backoff(state), left))

    def last(state: RetryCallState) -> Any:
        assert state.outcome is not None
        return state.outcome.result()

    return Retrying(
        stop=stop_after_delay(timeout_s), wait=wait, retry=retry, retry_error_callback=last
    )
