"""Where each package of the distribution lives in the checkout: ``autoscaler`` in
autoscaler/, and each package pyproject.toml maps to a folder of its own
(``[tool.setuptools.package-dir]``: ``autoscaler.providers`` in providers/, ...). What walks
the sources by module name (the layer test, the packaging test, the type check) reads the
layout here, from the table setuptools installs by, rather than naming the folders."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Each top package to its folder under ``root``."""
    with (root / "pyproject.toml").open("rb") as f:
        mapped: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {"autoscaler": root / "autoscaler", **{name: root / d for name, d in mapped.items()}}


def folders(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """Every folder of the packages, by its dotted package name (bytecode caches left
    out), each package before the ones inside it."""
    for package, top in package_dirs(root).items():
        for here, dirs, _names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            yield ".".join((package, *Path(here).relative_to(top).parts)), Path(here)


def modules(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """Every module of the packages by its dotted name; a package's ``__init__.py`` as
    ``package.__init__``."""
    for package, folder in folders(root):
        for path in sorted(folder.glob("*.py")):
            yield f"{package}.{path.stem}", path
