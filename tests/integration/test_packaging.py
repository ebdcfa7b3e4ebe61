"""What installing the project puts into site-packages: one name, ``autoscaler``.

``config`` is also a distribution on PyPI, and a user's working directory may hold a
``config.py`` or a ``providers/`` folder: nothing we install may answer to those names.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as pip builds it (an isolated build environment), from a
    copy of the tree: setuptools writes ``build/`` next to the sources."""
    source = tmp_path_factory.mktemp("source") / "autoscaler"
    shutil.copytree(
        ROOT,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "runs", "*.egg-info", "*cache*"),
    )
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (path,) = out.glob("autoscaler-*.whl")
    return path


@pytest.fixture
def shadowed_cwd(tmp_path: Path) -> Path:
    """A working directory whose ``config``, ``providers`` and ``bootstrap`` would break us
    if anything we run imported those names bare."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "config.py").write_text("raise ImportError('the user config.py was imported')\n")
    for name in ("providers", "bootstrap"):
        (cwd / name).mkdir()
        (cwd / name / "__init__.py").write_text(f"raise ImportError('user {name}/ imported')\n")
    (cwd / "quickstart.yaml").write_bytes(
        (ROOT / "config" / "examples" / "quickstart.yaml").read_bytes()
    )
    return cwd


def test_the_wheel_holds_one_top_level_package_with_its_data(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"autoscaler"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["autoscaler"]
    expected = {
        "autoscaler/bootstrap/agent.py",
        "autoscaler/config/schema.json",
        "autoscaler/config/report.schema.json",
        "autoscaler/providers/ec2.py",
        *(
            f"autoscaler/config/examples/{p.name}"
            for p in (ROOT / "config" / "examples").iterdir()
            if p.suffix in {".yaml", ".txt"}
        ),
    }
    assert expected <= set(names), sorted(expected - set(names))


def test_the_installed_wheel_validates_from_a_shadowing_directory(
    wheel: Path, shadowed_cwd: Path, tmp_path: Path
) -> None:
    """The wheel's code, unpacked as pip would, runs ``python -m autoscaler`` from a
    directory holding ``config.py``, ``providers/`` and ``bootstrap/``."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = subprocess.run(
        [sys.executable, "-c", "import autoscaler.config.schema as s; print(s.__file__)"],
        cwd=shadowed_cwd,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(probe.stdout.strip()).is_relative_to(site)
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", "quickstart.yaml"],
        cwd=shadowed_cwd,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "500" in result.stdout  # the task count validate reports


def test_the_editable_install_validates_from_a_shadowing_directory(shadowed_cwd: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", "quickstart.yaml"],
        cwd=shadowed_cwd,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
