"""What every config model shares: strict (unknown fields are errors) and frozen."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ConfigModel(BaseModel):
    """A part of a config file: a typo is an error naming the field, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]
"""A machine type's or a job's name: letters, digits, ``_``, ``.`` and ``-``."""


def known_types(field: str, named: Iterable[str], names: set[str]) -> None:
    """Refuse a name in ``named`` (given by ``field``) that is not a machine type's."""
    for name in named:
        if name not in names:
            raise ValueError(
                f"{field} names unknown machine type {name!r} (known: {', '.join(sorted(names))})"
            )
