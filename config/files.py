"""A bag's task files: ``files:`` with ``inputs`` put into each task's work directory
before it runs and ``outputs`` collected after it ends, templated like the command::

    bag:
      command: python3 sim.py --seed {seed} params.txt
      sweep: {seed: {stop: 100}}
      files:
        inputs: [params.txt, {path: "data/seed-{seed}.bin", as: seed.bin}]
        outputs: ["result.txt", "plots/*.png"]
        max_bytes: 100MB          # per task, all its outputs together
        to: s3://bucket/prefix    # default: the run directory, outputs/<task>/
        endpoint_url: http://...  # with to: an S3-compatible store, not AWS's

An input is a path (relative to the config file), put in the work directory under its
own file name, or ``{path, as}``. Outputs are glob patterns relative to the task's work
directory (``**`` matches directories too); a pattern that matches nothing is no error,
and the report says so.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator

from autoscaler.config.needs import Bytes
from autoscaler.config.strict import ConfigModel
from autoscaler.core.task_files import OUTPUTS_MAX_BYTES, FileSpec, InputFile, safe_relative


class Input(ConfigModel):
    """An input file and its name in the task's work directory."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    path: str = Field(min_length=1, description="the file, relative to the config (template)")
    as_: str | None = Field(
        default=None, alias="as", description="its name in the work directory (template)"
    )


class BagFiles(ConfigModel):
    """Files in and out of every task of a bag (templates filled like the command's)."""

    inputs: list[str | Input] = Field(
        default_factory=list, description="files put in each task's work directory first"
    )
    outputs: list[str] = Field(
        default_factory=list,
        description="glob patterns, relative to the task's work directory, kept after it ends",
    )
    max_bytes: Bytes = Field(
        default=OUTPUTS_MAX_BYTES, gt=0, description="a task's outputs together, at most"
    )
    to: str | None = Field(
        default=None,
        description="s3://bucket/prefix: outputs go to that bucket (default: the run "
        "directory's outputs/<task>/)",
    )

    endpoint_url: str | None = Field(
        default=None,
        description="with to: an S3-compatible endpoint (default: AWS's; else the ec2 "
        "section's endpoint_url)",
    )

    @field_validator("outputs")
    @classmethod
    def _relative(cls, outputs: list[str]) -> list[str]:
        for pattern in outputs:
            if not safe_relative(pattern):
                raise ValueError(
                    f"{pattern!r} must be relative to the task's work directory, without '..'"
                )
        return outputs

    @field_validator("to")
    @classmethod
    def _s3(cls, to: str | None) -> str | None:
        if to is not None and (not to.startswith("s3://") or not to[5:].split("/", 1)[0]):
            raise ValueError(f"must be s3://bucket[/prefix], got {to!r}")
        return to

    def templates(self) -> list[str]:
        """Every template the files give (their placeholders must be sweep names)."""
        names = [i if isinstance(i, str) else i.path for i in self.inputs]
        names += [i.as_ for i in self.inputs if isinstance(i, Input) and i.as_]
        return [*names, *self.outputs]


def fill_files(
    files: BagFiles, combos: Sequence[Mapping[str, object]] | None, base: Path, field: str
) -> tuple[list[FileSpec], list[str]]:
    """Each task's files (one per sweep combination; ``None``: one task, or a bag file's
    tasks all alike), and the problems found, each naming its field."""
    problems: list[str] = []
    specs: dict[tuple[object, ...], FileSpec] = {}
    out: list[FileSpec] = []
    max_bytes = int(files.max_bytes)
    for combo in combos if combos is not None else [{}]:
        inputs: list[InputFile] = []
        for i, given in enumerate(files.inputs):
            path, name = (given, None) if isinstance(given, str) else (given.path, given.as_)
            where = f"{field}.files.inputs[{i}]"
            source = _fill(path, combo, where, problems)
            target = _fill(name, combo, where + ".as", problems) if name else None
            if source is None or (name and target is None):
                continue
            resolved = Path(source).expanduser()
            resolved = resolved if resolved.is_absolute() else base / resolved
            target = target or resolved.name
            if not resolved.is_file():
                problems.append(f"{where}: no such file: {resolved}")
            elif not safe_relative(target):
                problems.append(f"{where}.as: {target!r} must be a name inside the work directory")
            else:
                inputs.append(InputFile(str(resolved), target))
        outputs = tuple(
            o
            for j, pattern in enumerate(files.outputs)
            if (o := _fill(pattern, combo, f"{field}.files.outputs[{j}]", problems)) is not None
        )
        key = (*inputs, *outputs)
        spec = specs.get(key)
        if spec is None:  # tasks alike share one record
            spec = specs[key] = FileSpec(
                tuple(inputs), outputs, max_bytes, files.to, files.endpoint_url
            )
        out.append(spec)
        if len(problems) > 10:
            break
    return out, problems[:10]


def _fill(
    template: str, combo: Mapping[str, object], where: str, problems: list[str]
) -> str | None:
    try:
        names = [n for _, n, _, _ in string.Formatter().parse(template) if n is not None]
        missing = [n for n in names if n.split(".", 1)[0].split("[", 1)[0] not in combo]
        if missing:
            problems.append(f"{where}: placeholder {{{missing[0]}}} is not a sweep name")
            return None
        return template.format_map(dict(combo)) if names else template
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        problems.append(f"{where}: cannot fill the template: {exc}")
        return None


def resolve_inputs(files: BagFiles, base: Path) -> BagFiles:
    """``files`` with its relative input paths (templates) made relative to ``base``."""
    prefix = str(base).replace("{", "{{").replace("}", "}}") + "/"

    def absolute(path: str) -> str:
        return path if path.startswith(("/", "~")) else prefix + path

    inputs = [
        absolute(i) if isinstance(i, str) else i.model_copy(update={"path": absolute(i.path)})
        for i in files.inputs
    ]
    return files.model_copy(update={"inputs": inputs})


def sweep_combos(sweep: Mapping[str, Sequence[object]]) -> list[dict[str, object]]:
    """Every combination of a sweep's values, in the order the commands are made."""
    names = list(sweep)
    return [dict(zip(names, c, strict=True)) for c in itertools.product(*sweep.values())]
