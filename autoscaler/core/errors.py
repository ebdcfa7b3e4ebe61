"""One exception root for everything autoscaler raises on purpose."""

from __future__ import annotations


class AutoscalerError(Exception):
    """Base of our errors.

    ``retryable`` tells a caller whether the same call may succeed later; ``code`` is
    the provider's or our own short error code (``"ConfigError"``, ``"Throttling"``).
    """

    code = "AutoscalerError"

    def __init__(self, message: str, *, retryable: bool = False, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        if code is not None:
            self.code = code


class ConfigError(AutoscalerError):
    """A configuration file that cannot be used; ``problems`` lists each bad field."""

    code = "ConfigError"

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


class StateError(AutoscalerError):
    """An event or action that does not fit the state (a bug or a corrupt journal)."""

    code = "StateError"
