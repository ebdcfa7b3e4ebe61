"""The packages the distribution holds: every folder under autoscaler/ and under each
folder pyproject.toml maps a package to (``[tool.setuptools.package-dir]``), named as
installed. A ``packages.find`` in pyproject.toml names a package by its folder, not by the
mapping (setuptools#5145): it cannot give ``autoscaler.config.examples`` for
config/examples. Folders without an ``__init__.py`` (config/examples and its files/) are
namespace packages here, so the data in them ships too."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent


def packages(root: Path = ROOT) -> list[str]:
    """Every package under ``root``'s package folders, bytecode caches left out."""
    with (root / "pyproject.toml").open("rb") as f:
        mapped: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    found = []
    for name, folder in {"autoscaler": "autoscaler", **mapped}.items():
        inside = find_namespace_packages(str(root / folder), exclude=["*__pycache__"])
        found += [name, *(f"{name}.{package}" for package in inside)]
    return sorted(found)


if __name__ == "__main__":  # as setuptools runs it
    setup(packages=packages())
