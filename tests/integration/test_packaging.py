"""The project as a user installs it: the wheel and the sdist, each built as pip builds it,
installed into a fresh virtual environment outside the checkout, and run from a directory
of the user's own, where every example config dry-runs.

Installing puts one name into site-packages, ``autoscaler``: ``config`` is also a
distribution on PyPI, and a user's working directory may hold a ``config.py`` or a
``providers/`` folder, so nothing we install may answer to those names.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from autoscaler.config.summary import config_kind
from tests.package_dirs import package_dirs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARTIFACTS = [
    # One worker builds and installs each artifact, and runs every test of it in turn.
    pytest.param(kind, marks=[pytest.mark.xdist_group(f"packaging-{kind}"), pytest.mark.long(2)])
    for kind in ("wheel", "sdist")
]
KINDS = {p.name: config_kind(p) for p in sorted(EXAMPLES.glob("*.yaml"))}
SERVICES = [name for name, kind in KINDS.items() if kind == "service"]
JOBS = [name for name, kind in KINDS.items() if kind == "job"]


def _files(top: Path) -> set[str]:
    """Every file under ``top``, as a path relative to it; bytecode caches left out."""
    found = set()
    for folder, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found.update((Path(folder) / n).relative_to(top).as_posix() for n in names)
    return found


def _installed(source: Path) -> set[str]:
    """Every file of the packages in ``source`` where an install puts it:
    providers/aws.py as autoscaler/providers/aws.py."""
    return {
        f"{package.replace('.', '/')}/{name}"
        for package, folder in package_dirs(source).items()
        for name in _files(folder)
    }


@pytest.fixture(scope="session")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout as a user has it (bytecode caches included): setuptools
    writes ``build/`` and ``*.egg-info`` next to the sources it builds."""
    copy = tmp_path_factory.mktemp("source") / "autoscaler"
    shutil.copytree(
        ROOT,
        copy,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "runs", "*.egg-info", ".*_cache", ".hypothesis"
        ),
    )
    return copy


def _build(command: list[str], out: Path, pattern: str) -> Path:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = out.glob(pattern)
    return path


@pytest.fixture(scope="session")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built as ``pip wheel .`` builds it (an isolated build environment)."""
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
    return _build([*pip, str(source)], out, "autoscaler-*.whl")


@pytest.fixture(scope="session")
def sdist(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source distribution, built by ``python -m build --sdist``."""
    out = tmp_path_factory.mktemp("sdist")
    build = [sys.executable, "-m", "build", "--sdist", "--outdir", str(out)]
    return _build([*build, str(source)], out, "autoscaler-*.tar.gz")


@pytest.fixture(scope="session", params=ARTIFACTS)
def artifact(request: pytest.FixtureRequest) -> Path:
    path: Path = request.getfixturevalue(request.param)
    return path


@dataclass(frozen=True)
class Installed:
    """A virtual environment outside the checkout with one artifact installed in it."""

    venv: Path
    package: Path  # its site-packages/autoscaler

    def env(self) -> dict[str, str]:
        """An environment that reaches nothing of the checkout: no PYTHONPATH, the
        venv's bin first on PATH."""
        keep = ("HOME", "LANG", "TMPDIR", "AUTOSCALER_STATE_DIR")
        return {
            **{k: os.environ[k] for k in keep if k in os.environ},
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin",
        }

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        """``autoscaler ARGS`` (the installed console script) in ``cwd``."""
        return subprocess.run(
            [str(self.venv / "bin" / "autoscaler"), *args],
            cwd=cwd,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )


@pytest.fixture(scope="session")
def installed(artifact: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``pip install ARTIFACT`` into a fresh venv, dependencies and all (from pip's
    cache); an sdist is built into a wheel on the way, as pip does for a user. The
    dependencies' modules are not compiled to bytecode here (``--no-compile``: about half
    of the install's CPU, botocore's thousands of modules); ours are imported from the
    venv as they are."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    done = subprocess.run(
        [*pip, str(artifact)],
        cwd=venv,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import autoscaler; print(autoscaler.__file__)"],
        cwd=venv,
        capture_output=True,
        text=True,
        check=True,
    )
    package = Path(probe.stdout.strip()).parent
    assert package.is_relative_to(venv), package
    return Installed(venv, package)


@pytest.fixture
def user_dir(installed: Installed, tmp_path: Path) -> Path:
    """A user's working directory, outside the checkout, holding the examples as the
    installed package ships them (in ``examples/``)."""
    cwd = tmp_path / "work"
    shutil.copytree(installed.package / "config" / "examples", cwd / "examples")
    return cwd


def test_the_artifact_holds_every_file_of_the_package_and_nothing_else(
    artifact: Path, source: Path
) -> None:
    expected = _installed(source)
    assert "autoscaler/offers/__init__.py" in expected
    assert "autoscaler/config/examples/files/params.txt" in expected
    if artifact.suffix == ".whl":
        names = set(zipfile.ZipFile(artifact).namelist())
        top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert zipfile.ZipFile(artifact).read(top_level).decode().split() == ["autoscaler"]
        shipped = {n for n in names if n.split("/", 1)[0] != top_level.split("/", 1)[0]}
    else:
        with tarfile.open(artifact) as tar:
            members = tar.getmembers()
        assert not [m.name for m in members if m.issym()]
        # The sdist holds the checkout's folders as they are.
        expected = {
            f"{folder.name}/{name}"
            for folder in package_dirs(source).values()
            for name in _files(folder)
        }
        prefix = artifact.name.removesuffix(".tar.gz") + "/"
        tops = tuple(f"{prefix}{folder.name}/" for folder in package_dirs(source).values())
        shipped = {
            m.name.removeprefix(prefix) for m in members if m.isfile() and m.name.startswith(tops)
        }
    assert shipped == expected, (sorted(expected - shipped), sorted(shipped - expected))


def test_every_module_of_the_installed_package_imports(
    installed: Installed, source: Path, tmp_path: Path
) -> None:
    """Each module the checkout has is in the venv, and imports there."""
    walk = (
        "import importlib, json, pkgutil, autoscaler\n"
        "names = [m.name for m in pkgutil.walk_packages(autoscaler.__path__, 'autoscaler.')]\n"
        "mods = [importlib.import_module(n) for n in names if not n.endswith('__main__')]\n"
        "print(json.dumps({m.__name__: m.__file__ for m in mods}))\n"
    )
    done = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", walk],
        cwd=tmp_path,
        env=installed.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    assert all(Path(f).is_relative_to(installed.package) for f in files.values())
    expected = {
        name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for name in _installed(source)
        if name.endswith(".py") and not name.endswith("__main__.py")
    } - {"autoscaler"}
    assert expected <= set(files), sorted(expected - set(files))


def test_the_installed_package_ships_every_example(installed: Installed) -> None:
    shipped = _files(installed.package / "config" / "examples")
    assert _files(EXAMPLES) <= shipped, sorted(_files(EXAMPLES) - shipped)


@pytest.mark.parametrize("example", sorted(KINDS))
def test_every_example_dry_runs_from_the_installed_package(
    installed: Installed, user_dir: Path, example: str
) -> None:
    """As the README shows it, from the user's directory with relative paths: a run
    config dry-runs; a service config is validated and dry-runs with every job file; a
    job file is validated against each service config and dry-runs with it."""
    path = f"examples/{example}"
    stem = example.removesuffix(".yaml")
    runs: list[tuple[str, ...]] = []
    if KINDS[example] == "run":
        runs.append(("run", path, "--dry-run", "--out", f"runs/{stem}"))
    elif KINDS[example] == "service":
        assert JOBS
        jobs = [arg for job in JOBS for arg in ("--job", f"examples/{job}")]
        checked = installed.run("validate", path, cwd=user_dir)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.startswith("ok service")
        runs.append(("run", path, "--dry-run", *jobs, "--out", f"runs/{stem}"))
    else:
        assert SERVICES
        for service in SERVICES:
            args = ("--service", f"examples/{service}")
            checked = installed.run("validate", path, *args, cwd=user_dir)
            assert checked.returncode == 0, checked.stdout + checked.stderr
            assert checked.stdout.startswith("ok job for service")
            out = f"runs/{stem}-{service.removesuffix('.yaml')}"
            runs.append(("run", f"examples/{service}", "--dry-run", "--job", path, "--out", out))
    for args in runs:
        done = installed.run(*args, cwd=user_dir)
        assert done.returncode == 0, done.stdout + done.stderr
        reports = list((user_dir / args[-1]).glob("**/report.json"))
        assert reports, done.stdout
        for report in reports:
            data = json.loads(report.read_text())
            assert data["tasks_done"] == data["tasks_total"] > 0, report


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
    (cwd / "quickstart.yaml").write_bytes((EXAMPLES / "quickstart.yaml").read_bytes())
    return cwd


def test_the_installed_package_validates_from_a_shadowing_directory(
    installed: Installed, shadowed_cwd: Path
) -> None:
    """``python -m autoscaler`` puts the working directory first on sys.path: one holding
    ``config.py``, ``providers/`` and ``bootstrap/`` changes nothing."""
    result = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-m", "autoscaler", "validate", "quickstart.yaml"],
        cwd=shadowed_cwd,
        env=installed.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "500" in result.stdout  # the task count validate reports


def test_the_editable_install_validates_from_a_shadowing_directory(shadowed_cwd: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", "quickstart.yaml"],
        cwd=shadowed_cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
