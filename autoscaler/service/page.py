"""The service's read-only status page, served at ``GET /`` (issue 13): ``page.html``,
package data beside this module.

One self-contained HTML document: inline CSS and vanilla JS, no external assets, so it
works on a host without internet access. Its script polls ``api/v1/status`` (relative,
same origin: the ``autoscaler_token`` cookie set by ``/login`` goes along) once a second
and redraws the header (service), the jobs table, and for each running or recently ended
job two small SVG charts over its ``history`` (tasks done, spend against the budget; the
deadline as a vertical line) and its machines. Every string from the API is HTML-escaped
(job names are user input). A failed fetch shows ``#error`` and keeps the last data.

The header names the user of the token the page was opened with (``you``), the jobs
table each job's submitter. Elements a test can query: ``#updated`` (time of the last
good refresh, ``data-count`` refreshes so far), ``#error``, ``[data-field]`` cells in
``#service``, rows ``tr[data-job-id]`` with ``td[data-field=user|done|spend|...]``
(``data-late`` on ``finish``), ``section[data-job-detail]`` holding
``svg[data-chart=done|spend]`` and ``table[data-machines-for]`` with rows
``tr[data-machine-id]``.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

PAGE_FILE = "page.html"


@cache
def render_page() -> str:
    """The status page (static: all data comes from the API, fetched by its script)."""
    return files("autoscaler.service").joinpath(PAGE_FILE).read_text(encoding="utf-8")
