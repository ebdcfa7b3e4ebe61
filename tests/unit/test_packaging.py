"""What pyproject.toml tells setuptools to ship: every package and every file in it, found
rather than listed (a hand-kept list missed ``autoscaler.offers`` and
``autoscaler.categories``, and the wheel failed on its first import). The wheel and the
sdist themselves are built and installed in tests/integration/test_packaging.py."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autoscaler"


def _setuptools() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        table: dict[str, Any] = tomllib.load(f)["tool"]["setuptools"]
    return table


def _found(root: Path = ROOT) -> set[str]:
    """The packages setuptools finds in ``root`` under the configuration in pyproject.toml."""
    find = _setuptools()["packages"]["find"]
    finder = find_namespace_packages if find.get("namespaces", True) else find_packages
    assert find.get("where", ["."]) == ["."]
    include, exclude = find.get("include", ("*",)), find.get("exclude", ())
    return set(finder(where=str(root), include=include, exclude=exclude))


def _dotted(folder: Path) -> str:
    return ".".join(folder.relative_to(ROOT).parts)


def _tracked_files() -> list[Path]:
    """The committed files inside the package, through its symlinked folders
    (providers/, bootstrap/, config/ are reached as autoscaler/providers/, ...)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    tracked = {ROOT / name for name in listed.split("\0") if name}
    files = []
    for top, _dirs, names in os.walk(PACKAGE, followlinks=True):
        for name in names:
            path = Path(top) / name
            if path.is_file() and ROOT / path.resolve().relative_to(ROOT) in tracked:
                files.append(path)
    return files


def test_packages_are_found_not_listed() -> None:
    packages = _setuptools()["packages"]
    assert isinstance(packages, dict), "a list of packages: give packages.find instead"
    assert packages["find"]["include"] == ["autoscaler*"]


def test_every_folder_with_an_init_is_a_package_the_build_finds() -> None:
    inits = {
        _dotted(Path(top))
        for top, _dirs, names in os.walk(PACKAGE, followlinks=True)
        if "__init__.py" in names
    }
    assert {"autoscaler.offers", "autoscaler.categories", "autoscaler.config"} <= inits
    assert inits <= _found(), sorted(inits - _found())


def test_a_bytecode_cache_is_no_package(tmp_path: Path) -> None:
    """A checkout that has run holds __pycache__ folders; the wheel does not."""
    for folder in ("autoscaler/__pycache__", "autoscaler/core/__pycache__"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "autoscaler" / "core" / "__init__.py").touch()
    assert _found(tmp_path) == {"autoscaler", "autoscaler.core"}


def test_every_committed_file_in_the_package_ships() -> None:
    """A committed file is shipped when its folder is a found package and the package
    data patterns take it (modules always are)."""
    found = _found()
    patterns = _setuptools()["package-data"]
    missing = []
    files = _tracked_files()
    assert any(p.name == "page.html" for p in files)
    assert any(p.parent.name == "files" and p.suffix == ".txt" for p in files)
    for path in files:
        package = _dotted(path.parent)
        taken = path.suffix == ".py" or any(
            fnmatch.fnmatch(path.name, pattern)
            for key in ("*", package)
            for pattern in patterns.get(key, [])
        )
        if package not in found or not taken:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, missing
