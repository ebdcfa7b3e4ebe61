"""Whom a run's machines are paid for: its project, its job and its user, carried by
every machine from the moment it exists, so a bill can be split by them.

A run hands them to its provider with every launch (the ``tags`` of ``Provider.launch``)
and each provider says them in its own way: EC2 as tags on the instance and its volumes
(``autoscaler:project``, ``autoscaler:job``, ``autoscaler:user``: keys a user activates
as cost allocation tags, values fitted to AWS's rules by ``ec2.aws_tag_value``); Slurm
as the job's ``--comment`` (and ``--account`` where the config says the cluster's
accounts are the projects); Grid Engine as the job's account string (``qsub -A``).

The values are data the run is given where it is made (``run.rundir.RunFiles``); nothing
here looks anything up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

PROJECT_TAG = "autoscaler:project"
JOB_TAG = "autoscaler:job"
USER_TAG = "autoscaler:user"
COST_TAG_KEYS = (PROJECT_TAG, JOB_TAG, USER_TAG)

SHARED = "shared"
"""What a tag says of machines several projects, jobs or users draw on (the service's
deadline pool)."""


@dataclass(frozen=True, slots=True)
class CostTags:
    """The project, job and user a run's machines are charged to."""

    project: str  # the config's ``project`` (``Work.project_name``)
    job: str  # the run's name; a service's job id
    user: str  # who started it: the OS user of ``autoscaler run``, a job's submitter

    def tags(self) -> dict[str, str]:
        """As the extra tags of a launch."""
        return {PROJECT_TAG: self.project, JOB_TAG: self.job, USER_TAG: self.user}


def common(of: Iterable[CostTags]) -> CostTags:
    """The tags of machines that serve all of ``of`` at once: each of project, job and
    user is the one value all of them share, else ``SHARED``."""
    tags = list(of)

    def one(values: set[str]) -> str:
        return values.pop() if len(values) == 1 else SHARED

    return CostTags(
        one({t.project for t in tags}), one({t.job for t in tags}), one({t.user for t in tags})
    )


def project_of(tags: Mapping[str, str]) -> str | None:
    """The project a launch's ``tags`` name, if they name one."""
    return tags.get(PROJECT_TAG) or None
