"""Task files (issue 23 §2) without services: the config edge (``autoscaler validate`` in a
process of its own names the field), templates filled per task, the tasks file, and the
daemon's staging (``run.staging``) on a real directory: attempts staged, one committed,
the others dropped, a restart finishing what its journal holds."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import TaskDone, TaskSpec
from autoscaler.core.task_files import (
    FileSpec,
    InputFile,
    Stored,
    attempt_name,
    safe_relative,
    spec_from_json,
    spec_json,
)
from autoscaler.run.assemble import new_state
from autoscaler.run.staging import Staging
from tests.unit.test_cli_process import autoscaler


def _config(tmp_path: Path, files: dict[str, Any], **bag: Any) -> Path:
    data = {
        "bag": {"command": "run {i}", "sweep": {"i": [0, 1]}, "files": files, **bag},
        "constraint": {"budget": 10},
        "machine_types": [{"name": "a", "price": 1, "max_count": 2}],
        "provider": "local",
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_inputs_and_outputs_are_filled_per_task_relative_to_the_config(tmp_path: Path) -> None:
    """Each task gets its own input (a sweep value in the path), the shared one, and its
    output patterns; a sweep name used only by the files is used."""
    (tmp_path / "data").mkdir()
    for i in (0, 1):
        (tmp_path / "data" / f"in-{i}.txt").write_text(str(i))
    (tmp_path / "common.txt").write_text("c")
    path = _config(
        tmp_path,
        {
            "inputs": ["common.txt", {"path": "data/in-{i}.txt", "as": "in.txt"}],
            "outputs": ["out-{i}/*.txt"],
            "max_bytes": "2MB",
        },
        command="run",
        sweep={"i": [0, 1]},
    )
    tasks = expand_bag(load_config(path))
    assert [t.files for t in tasks] == [
        FileSpec(
            (
                InputFile(str(tmp_path / "common.txt"), "common.txt"),
                InputFile(str(tmp_path / "data" / f"in-{i}.txt"), "in.txt"),
            ),
            (f"out-{i}/*.txt",),
            2_000_000,
            None,
        )
        for i in (0, 1)
    ]


@pytest.mark.parametrize(
    ("files", "field", "says"),
    [
        ({"outputs": ["../up.txt"]}, "bag.files.outputs", "without '..'"),
        ({"outputs": ["/abs.txt"]}, "bag.files.outputs", "relative"),
        ({"to": "gs://bucket"}, "bag.files.to", "s3://bucket"),
        ({"max_bytes": "lots"}, "bag.files.max_bytes", ""),
        ({"inputs": ["missing-{i}.txt"]}, "bag.files.inputs[0]", "no such file"),
        ({"outputs": ["{nope}.txt"]}, "bag.files.outputs[0]", "{nope}"),
        ({"outputs": ["a"], "extra": 1}, "bag.files.extra", ""),
    ],
)
def test_validate_names_the_bad_field(
    tmp_path: Path, files: dict[str, Any], field: str, says: str
) -> None:
    """A bad ``files`` is refused by ``autoscaler validate``, naming the field, no traceback."""
    done = autoscaler("validate", str(_config(tmp_path, files)))
    assert done.returncode != 0
    assert field in done.stderr + done.stdout
    assert says in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_synthetic_tasks_take_no_files(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    data = yaml.safe_load(_config(tmp_path, {"outputs": ["x"]}).read_text())
    data["bag"] = {"synthetic": 3, "files": {"outputs": ["x"]}}
    path.write_text(yaml.safe_dump(data))
    done = autoscaler("validate", str(path))
    assert done.returncode != 0
    assert "files: only with a command or a file" in done.stderr + done.stdout


def test_a_spec_survives_the_tasks_file() -> None:
    spec = FileSpec((InputFile("/a/b", "b"),), ("*.txt", "d/**"), 5, "s3://x/y")
    assert spec_from_json(json.loads(json.dumps(spec_json(spec)))) == spec
    assert spec_from_json(None) is None


def test_paths_that_leave_the_work_directory_are_unsafe() -> None:
    assert safe_relative("a/b.txt")
    assert safe_relative("**/*.png")
    assert not safe_relative("../a")
    assert not safe_relative("a/../../b")
    assert not safe_relative("/etc/passwd")
    assert not safe_relative("")
    assert attempt_name(3, "i-0abc/x", 7) == "3.i-0abc_x-7"


# --- the daemon's staging on a real directory -----------------------------------------


class _Cfg:
    ec2 = None
    providers = None

    def shared_fs(self, type_name: str) -> bool:
        return False


SEEN: list[str] = []  # the machines an upload kept in touch


def _staging(tmp_path: Path, n: int = 3) -> Staging:
    spec = FileSpec((), ("*.txt",), 100, None)
    tasks = [TaskSpec(i, f"t{i}", files=spec) for i in range(n)]
    log = structlog.wrap_logger(structlog.ReturnLogger())
    return Staging(_Cfg(), tmp_path, tasks, log)  # type: ignore[arg-type]


def _upload(staging: Staging, task: int, machine: str, run: int, files: dict[str, bytes]) -> Any:
    """An agent's attempt: announced, then each file PUT whole."""
    staging.payload(staging.tasks[task].files, task, machine, run, False)  # type: ignore[arg-type]
    ask = {
        "machine": machine,
        "run": run,
        "task": task,
        "files": [[p, len(b)] for p, b in files.items()],
    }
    status, answer = staging.plan(json.dumps(ask).encode())
    assert status == 200, answer
    for url, body in zip(answer["put"], files.values(), strict=True):
        assert staging.receive(url, io.BytesIO(body), len(body), SEEN.append) == (200, {})
    return ask["files"]


def test_an_attempt_is_committed_whole_and_the_losing_one_is_dropped(tmp_path: Path) -> None:
    """Two attempts of one task store their files; the one whose result counts becomes
    outputs/<task>/, the other leaves nothing."""
    staging = _staging(tmp_path)
    said_a = _upload(staging, 1, "m-a", 1, {"r.txt": b"from a", "d/x.txt": b"xx"})
    said_b = _upload(staging, 1, "m-b", 4, {"r.txt": b"from b"})
    stored_a = staging.check(1, "m-a", 1, said_a)
    stored_b = staging.check(1, "m-b", 4, said_b)
    assert stored_a == Stored("1.m-a-1", 2, 8)
    assert {"m-a", "m-b"} <= set(SEEN)  # an uploading agent counts as in touch
    assert isinstance(stored_b, Stored)

    state = new_state(load_config(_config(tmp_path, {"outputs": ["*.txt"]})), 3, 1)
    state.tasks.stored[1] = stored_a  # as the fold of the first TaskDone left it
    staging.settle(state, [TaskDone(1, "m-a", 1.0, stored_a), TaskDone(1, "m-b", 1.0, stored_b)])
    root = tmp_path / "outputs"
    assert (root / "1" / "r.txt").read_bytes() == b"from a"
    assert (root / "1" / "d" / "x.txt").read_bytes() == b"xx"
    assert list((root / ".attempts").iterdir()) == []


class _CommitMidway(io.BytesIO):
    """A loser's body whose first block arrives just as the daemon commits the winner
    (the dispatcher thread reads while the daemon thread settles)."""

    def __init__(self, body: bytes, commit: Any) -> None:
        super().__init__(body)
        self.commit = commit

    def read(self, n: int | None = -1) -> bytes:
        if self.commit is not None:
            self.commit()
            self.commit = None
        return super().read(n)


@pytest.mark.parametrize("when", ["during", "before"])
def test_a_loser_s_upload_racing_the_commit_leaves_nothing(tmp_path: Path, when: str) -> None:
    """The winner is committed while (or before) a replica's file arrives: the file is
    taken in and let go, the replica's run still counts as one (a sample of its type),
    and no attempt folder is left behind."""
    staging = _staging(tmp_path)
    said_a = _upload(staging, 2, "m-a", 1, {"r.txt": b"from a"})
    stored_a = staging.check(2, "m-a", 1, said_a)
    assert isinstance(stored_a, Stored)
    state = new_state(load_config(_config(tmp_path, {"outputs": ["*.txt"]})), 3, 1)
    state.tasks.stored[2] = stored_a

    def commit() -> None:
        staging.settle(state, [TaskDone(2, "m-a", 1.0, stored_a)])

    staging.payload(staging.tasks[2].files, 2, "m-b", 3, False)  # type: ignore[arg-type]
    ask = {"machine": "m-b", "run": 3, "task": 2, "files": [["r.txt", 6]]}
    status, answer = staging.plan(json.dumps(ask).encode())
    assert status == 200
    body: io.BytesIO = _CommitMidway(b"from b", commit)
    if when == "before":
        commit()
        body = io.BytesIO(b"from b")
    status, said = staging.receive(answer["put"][0], body, 6, SEEN.append)
    assert (status, said) == (200, {})
    assert staging.check(2, "m-b", 3, ask["files"]) == Stored("2.m-b-3", 1, 6)
    root = tmp_path / "outputs"
    assert (root / "2" / "r.txt").read_bytes() == b"from a"
    assert list((root / ".attempts").iterdir()) == []


def test_a_file_cut_short_is_never_stored_under_its_name(tmp_path: Path) -> None:
    """A body that ends early (an agent killed mid-upload) leaves no file; the result
    that claims it is refused."""
    staging = _staging(tmp_path)
    staging.payload(staging.tasks[0].files, 0, "m", 1, False)  # type: ignore[arg-type]
    status, answer = staging.plan(
        json.dumps({"machine": "m", "run": 1, "task": 0, "files": [["big.txt", 50]]}).encode()
    )
    assert status == 200
    status, said = staging.receive(answer["put"][0], io.BytesIO(b"x" * 20), 50, SEEN.append)
    assert status == 400
    assert "short" in said["error"]
    assert not list((tmp_path / "outputs").rglob("big.txt*"))
    refused = staging.check(0, "m", 1, [["big.txt", 50]])
    assert refused == "outputs: 1 of 1 files did not arrive whole (big.txt)"


def test_the_limit_and_unknown_attempts_are_refused(tmp_path: Path) -> None:
    staging = _staging(tmp_path)
    ask = {"machine": "m", "run": 1, "task": 0, "files": [["a.txt", 60], ["b.txt", 60]]}
    assert staging.plan(json.dumps(ask).encode())[0] == 410  # never handed out
    staging.payload(staging.tasks[0].files, 0, "m", 1, False)  # type: ignore[arg-type]
    assert staging.plan(json.dumps(ask).encode()) == (
        413,
        {"error": "outputs 0.00012 MB exceed limit 0.0001 MB"},
    )


def test_a_restart_finishes_the_journaled_commit_and_drops_the_rest(tmp_path: Path) -> None:
    """The journal holds a TaskDone with its Stored, the daemon died before the rename:
    the next one renames it, and drops an attempt nobody committed."""
    staging = _staging(tmp_path)
    said = _upload(staging, 2, "m", 1, {"r.txt": b"kept"})
    stored = staging.check(2, "m", 1, said)
    _upload(staging, 0, "m", 2, {"r.txt": b"dropped"})
    assert isinstance(stored, Stored)
    cfg = load_config(_config(tmp_path, {"outputs": ["*.txt"]}))
    state = new_state(cfg, 3, 1)
    state.tasks.stored[2] = stored  # as the fold of that TaskDone left it
    fresh = _staging(tmp_path)
    fresh.recover(state)
    assert (tmp_path / "outputs" / "2" / "r.txt").read_bytes() == b"kept"
    assert not (tmp_path / "outputs" / ".attempts").exists()
    assert not (tmp_path / "outputs" / "0").exists()


def test_a_deadline_job_with_files_keeps_a_run_of_its_own(tmp_path: Path) -> None:
    """The service's deadline pool keeps only each added task's command: a job with task
    files would lose them there, so it gets its own run (one without joins the pool)."""
    from autoscaler.service.pool import shares_the_pool

    path = _config(tmp_path, {"outputs": ["out-{i}.txt"]})
    data = yaml.safe_load(path.read_text())
    data["constraint"] = {"deadline_s": 600}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert not shares_the_pool(load_config(path))
    del data["bag"]["files"]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert shares_the_pool(load_config(path))
