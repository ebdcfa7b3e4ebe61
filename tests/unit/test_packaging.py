"""What pyproject.toml tells setuptools to ship: every package and every file in it, found
rather than listed (a hand-kept list missed ``autoscaler.offers`` and
``autoscaler.categories``, and the wheel failed on its first import): setup.py finds them
in autoscaler/ and in each folder pyproject.toml maps a package to. The wheel and the
sdist themselves are built and installed in tests/integration/test_packaging.py."""

from __future__ import annotations

import fnmatch
import importlib.util
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from tests.package_dirs import ROOT, folders, package_dirs


def _setuptools() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        table: dict[str, Any] = tomllib.load(f)["tool"]["setuptools"]
    return table


def _found(root: Path = ROOT) -> set[str]:
    """The packages setup.py gives setuptools for the checkout at ``root``."""
    spec = importlib.util.spec_from_file_location("setup_packages", ROOT / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    return set(setup.packages(root))


def _tracked_files() -> list[tuple[str, Path]]:
    """The committed files in the packages' folders, each with its package's name."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    tracked = {ROOT / name for name in listed.split("\0") if name}
    return [
        (package, path)
        for package, folder in folders()
        for path in sorted(folder.iterdir())
        if path in tracked
    ]


def test_packages_are_found_not_listed() -> None:
    assert "packages" not in _setuptools(), "a list of packages: setup.py finds them"
    assert {"autoscaler.offers", "autoscaler.providers", "autoscaler.config.examples"} <= _found()


def test_every_folder_with_an_init_is_a_package_the_build_finds() -> None:
    inits = {package for package, folder in folders() if (folder / "__init__.py").exists()}
    assert {"autoscaler.offers", "autoscaler.categories", "autoscaler.config"} <= inits
    assert inits <= _found(), sorted(inits - _found())


def test_a_bytecode_cache_is_no_package(tmp_path: Path) -> None:
    """A checkout that has run holds __pycache__ folders; the wheel does not."""
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    for folder in package_dirs(tmp_path).values():
        (folder / "__pycache__").mkdir(parents=True)
    (tmp_path / "autoscaler" / "core" / "__pycache__").mkdir(parents=True)
    (tmp_path / "autoscaler" / "core" / "__init__.py").touch()
    assert _found(tmp_path) == {"autoscaler.core", *package_dirs()}


def test_every_committed_file_in_the_package_ships() -> None:
    """A committed file is shipped when its folder is a found package and the package
    data patterns take it (modules always are)."""
    found = _found()
    patterns = _setuptools()["package-data"]
    missing = []
    files = _tracked_files()
    assert any(p.name == "page.html" for _, p in files)
    assert any(p.parent.name == "files" and p.suffix == ".txt" for _, p in files)
    assert any(package == "autoscaler.bootstrap" and p.name == "agent.py" for package, p in files)
    for package, path in files:
        taken = path.suffix == ".py" or any(
            fnmatch.fnmatch(path.name, pattern)
            for key in ("*", package)
            for pattern in patterns.get(key, [])
        )
        if package not in found or not taken:
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, missing
