"""Whom the service's machines are charged to (``CostTags``: the tags EC2 instances and
volumes carry, a Slurm job's comment, a Grid Engine job's account).

A job on machines of its own: its project, its job id, and who submitted it. The
deadline pool's machines serve several jobs over their lives, so what a launch of the
pool says is what the pool's jobs have in common when it launches: the project when
they all belong to one, else ``shared``; the same for the job (the job's id while the
pool has one job) and the user. A machine keeps the tags it was launched with; the
service's own reports split a pool machine's cost among its jobs by the time it ran
each one's tasks (``report.attribution``), which tags cannot.
"""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.providers.cost_tags import CostTags, common
from autoscaler.service.store import JobRow


def job_cost_tags(row: JobRow) -> CostTags:
    """Whom the machines of job ``row`` are charged to."""
    return CostTags(row.config.project_name, row.id, row.user)


def pool_cost_tags(rows: Iterable[JobRow]) -> CostTags:
    """Whom the pool's machines launched now are charged to, with ``rows`` its jobs."""
    return common(job_cost_tags(row) for row in rows)
