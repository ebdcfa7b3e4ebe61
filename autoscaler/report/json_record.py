"""The decorator of the records ``report.json`` is made of (``records``, ``category_lines``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

from pydantic import ConfigDict

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """A frozen dataclass that is part of report.json: its attribute docstrings become
    the schema's descriptions, and a key it does not name is an error when read back,
    so report.json and its schema cannot drift apart unnoticed."""
    cls.__pydantic_config__ = ConfigDict(  # type: ignore[attr-defined]
        extra="forbid", use_attribute_docstrings=True
    )
    return dataclass(frozen=True)(cls)
