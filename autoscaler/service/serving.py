"""A service in the foreground (``autoscaler serve``): opened with its API listening,
held until SIGINT or SIGTERM asks it to stop, then closed, its running jobs handing their
machines over to the next service on the same state directory (or releasing them).

A stop by signal is a restart as systemd or an upgrade makes it: nothing is lost, so
the signal only asks, and the service closes at its own pace.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

from autoscaler.bootstrap.tls import ServerCert, kept_self_signed
from autoscaler.config.service_schema import ServiceTls
from autoscaler.core.errors import AutoscalerError
from autoscaler.service.api import ApiServer, serve_api
from autoscaler.service.client import API_FILE
from autoscaler.service.service import Service

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While held, SIGINT and SIGTERM only ask to stop (``wait`` returns); the handlers
    that were there before come back on leaving."""

    def __init__(self) -> None:
        self._asked = threading.Event()
        self._before: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self._before = {s: signal.signal(s, self._ask) for s in STOP_SIGNALS}
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for s, handler in self._before.items():
            signal.signal(s, handler)

    def _ask(self, signum: int, frame: FrameType | None) -> None:
        self._asked.set()

    def wait(self) -> None:
        """Return once a stop is asked (a timed wait: a signal handler runs between two)."""
        while not self._asked.wait(0.5):
            pass


@contextlib.contextmanager
def serving(
    service: Service, host: str, port: int, tls: ServiceTls | None = None
) -> Iterator[ApiServer]:
    """``service`` open, its API listening on ``host``:``port`` (over HTTPS with ``tls``:
    its certificate, or one made at the first start and kept in the state directory); on
    leaving, its API file is gone and the API's socket closed. A service that could not
    open is closed (as far as it opened) before the error goes on."""
    try:
        service.open()
        server = serve_api(service, host, port, api_certificate(service, host, tls))
    except AutoscalerError:
        service.close()  # safe on a service opened in part, or not at all
        raise
    try:
        yield server
    finally:
        with contextlib.suppress(FileNotFoundError):
            (service.state_dir / API_FILE).unlink()
        server.server_close()


def api_certificate(service: Service, host: str, tls: ServiceTls | None) -> ServerCert | None:
    """The API's certificate: the config's, or the state directory's self-signed one."""
    if tls is None:
        return None
    if tls.cert_file is not None and tls.key_file is not None:
        return ServerCert(tls.cert_file, tls.key_file)
    return kept_self_signed(service.state_dir, [host])


def stop(service: Service, server: ApiServer, *, release: bool) -> None:
    """Stop answering, then close ``service``: its running jobs hand their machines over
    (each keeps its paid time and its agent its lease) or, with ``release``, release
    them."""
    server.shutdown()
    service.close(jobs="release" if release else "hand_over")
