"""The project as a user installs it: the wheel and the sdist, each built as pip builds it;
the wheel installed into a fresh virtual environment outside the checkout and run from a
directory of the user's own, where every example config dry-runs. pip installs an sdist
by building a wheel from it: that wheel is the checkout's, file for file and byte for
byte, so what its install would do the wheel's install shows.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from autoscaler.config.summary import config_kind
from tests.package_dirs import package_dirs

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WHEEL_GROUP = pytest.mark.xdist_group("packaging-wheel")
"""One worker builds and installs the wheel, and runs every test of the install in turn."""
ARTIFACTS = [
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
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``pip install WHEEL`` into a fresh venv, dependencies and all (from pip's
    cache). The dependencies' modules are not compiled to bytecode here
    (``--no-compile``: about half of the install's CPU, botocore's thousands of modules);
    ours are imported from the venv as they are."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    done = subprocess.run(
        [*pip, str(wheel)],
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


def user_dir(installed: Installed, top: Path) -> Path:
    """A user's working directory, outside the checkout, holding the examples as the
    installed package ships them (in ``examples/``)."""
    cwd = top / "work"
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


@WHEEL_GROUP
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


@WHEEL_GROUP
def test_the_installed_package_ships_every_example(installed: Installed) -> None:
    shipped = _files(installed.package / "config" / "examples")
    assert _files(EXAMPLES) <= shipped, sorted(_files(EXAMPLES) - shipped)


DRY_RUN = ("quickstart.yaml", "commands.yaml", "files.yaml", "spot_market.yaml", *SERVICES)
"""The examples the install dry-runs: one run config, those that name files beside
them (a command list, inputs, a price trace), and every service config with every job
file. The others dry-run from the checkout's root (tests/integration/test_examples.py)
and are validated here: their files are shipped (``test_the_installed_package_ships…``)
and every module they could reach imports (``test_every_module…``)."""

AT_ONCE = 3
"""Examples dry-run side by side from one install: each mostly waits on its own
process, and one worker holds the install (its xdist group)."""


def _dry_runs(installed: Installed, user_dir: Path, example: str) -> str | None:
    """As the README shows it, from the user's directory with relative paths: a run
    config is validated, and dry-runs if it is one of ``DRY_RUN``; a service config is
    validated and dry-runs with every job file (so every job file dry-runs with every
    service config); a job file is validated against each service config. What went
    wrong, or None."""
    path = f"examples/{example}"
    stem = example.removesuffix(".yaml")
    runs: list[tuple[str, ...]] = []
    if KINDS[example] == "run":
        checked = installed.run("validate", path, cwd=user_dir)
        if checked.returncode != 0 or not checked.stdout.startswith("ok"):
            return f"validate: {checked.stdout}{checked.stderr}"
        if example in DRY_RUN:
            runs.append(("run", path, "--dry-run", "--out", f"runs/{stem}"))
    elif KINDS[example] == "service":
        jobs = [arg for job in JOBS for arg in ("--job", f"examples/{job}")]
        checked = installed.run("validate", path, cwd=user_dir)
        if checked.returncode != 0 or not checked.stdout.startswith("ok service"):
            return f"validate: {checked.stdout}{checked.stderr}"
        runs.append(("run", path, "--dry-run", *jobs, "--out", f"runs/{stem}"))
    else:
        for service in SERVICES:
            args = ("--service", f"examples/{service}")
            checked = installed.run("validate", path, *args, cwd=user_dir)
            if checked.returncode != 0 or not checked.stdout.startswith("ok job for service"):
                return f"validate with {service}: {checked.stdout}{checked.stderr}"
    for args in runs:
        done = installed.run(*args, cwd=user_dir)
        if done.returncode != 0:
            return f"{' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}"
        reports = list((user_dir / args[-1]).glob("**/report.json"))
        if not reports:
            return f"{' '.join(args)} wrote no report.json: {done.stdout}"
        for report in reports:
            data = json.loads(report.read_text())
            if not data["tasks_done"] == data["tasks_total"] > 0:
                return f"{report}: {data['tasks_done']} of {data['tasks_total']} tasks done"
    return None


@WHEEL_GROUP
@pytest.mark.long(2)
def test_every_example_dry_runs_from_the_installed_package(
    installed: Installed, tmp_path: Path
) -> None:
    """Every example is checked from the user's own directory, each in a directory of its
    own, ``AT_ONCE`` at a time; those of ``DRY_RUN`` dry-run."""
    assert JOBS
    assert SERVICES
    assert set(DRY_RUN) <= set(KINDS)
    examples = sorted(KINDS)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        went = {
            e: pool.submit(_dry_runs, installed, user_dir(installed, tmp_path / e), e)
            for e in examples
        }
        failed = {e: why for e, future in went.items() if (why := future.result()) is not None}
    assert not failed, "\n\n".join(f"{e}: {why}" for e, why in failed.items())


def _members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.mark.xdist_group("packaging-sdist")
def test_the_wheel_pip_builds_from_the_sdist_is_the_checkout_s(
    sdist: Path, wheel: Path, tmp_path: Path
) -> None:
    """``pip install SDIST`` builds a wheel from it in an isolated environment and installs
    that: it is the checkout's wheel, so the tests of the wheel's install stand for it."""
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path)]
    built = _build([*pip, str(sdist)], tmp_path, "autoscaler-*.whl")
    ours, theirs = _members(wheel), _members(built)
    assert set(theirs) == set(ours), (
        sorted(set(ours) - set(theirs)),
        sorted(set(theirs) - set(ours)),
    )
    assert not [name for name in ours if ours[name] != theirs[name]]


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


@WHEEL_GROUP
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
