"""The worker agent's command line, read without ``argparse`` when well formed
(``read_flags``), and its URLs without ``urllib.parse`` (``split_url``): the same values
as those libraries give, and their messages where they refuse. And what an agent
imports to start (a fleet of agents starting at once pays it on every one)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from autoscaler.bootstrap import agent
from autoscaler.bootstrap.agent_start import AGENT, compiled_agent

VALUES = {
    "--url": ["http://127.0.0.1:8080", "http://h/base/", "https://x.example:443"],
    "--machine": ["w-L0-3", "m"],
    "--workdir": ["/tmp", "rel/dir"],
    "--heartbeat-s": ["2", "0.5", "1e-3"],
    "--orphan-after-s": ["60", "7.5"],
    "--start-delay-s": ["0", "1.25"],
    "--ready-at": ["1790000000.123456", "-5"],
    "--tail-bytes": ["4096", "0"],
    "--slots": ["1", "16"],
    "--report-s": ["0.25", "0"],
    "--token-file": ["/run/token"],
    "--notice-url": ["http://169.254.169.254/latest/meta-data/spot/instance-action"],
    "--notice-every-s": ["5", "0.1"],
}


def start(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -S ARGV`` with a token in the environment, as a provider starts an agent."""
    return subprocess.run(
        [sys.executable, "-S", *argv],
        env={**os.environ, "AUTOSCALER_TOKEN": "t"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def command_lines(count: int, seed: int) -> list[list[str]]:
    """Random well-formed command lines: the required flags and some others, in any
    order, as ``--flag value`` or ``--flag=value``."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        flags = [
            "--url",
            "--machine",
            *rng.sample(sorted(set(VALUES) - {"--url", "--machine"}), rng.randint(0, 11)),
        ]
        rng.shuffle(flags)
        argv: list[str] = []
        for flag in flags:
            value = rng.choice(VALUES[flag])
            argv += [f"{flag}={value}"] if rng.random() < 0.3 else [flag, value]
        lines.append(argv)
    return lines


@pytest.mark.parametrize("argv", command_lines(200, seed=11))
def test_a_well_formed_command_line_reads_as_argparse_reads_it(argv: list[str]) -> None:
    assert agent.read_flags(argv) == vars(agent._parser().parse_args(argv))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--machine", "m"], "the following arguments are required: --url"),
        (["--url", "http://h:1", "--machine", "m", "--bogus", "1"], "unrecognized arguments"),
        (["--url", "http://h:1", "--machine", "m", "--slots", "x"], "invalid int value: 'x'"),
        (["--url", "http://h:1", "--machine"], "expected one argument"),
        (["--url", "ftp://h", "--machine", "m"], "--url must be http://HOST[:PORT], got 'ftp://h'"),
        (["--url", "http://h:99999", "--machine", "m"], "--url has a bad port"),
        (
            ["--url", "http://h:1", "--machine", "m", "--heartbeat-s", "-1"],
            "--heartbeat-s must be positive",
        ),
        (
            ["--url", "http://h:1", "--machine", "m", "--tail-bytes", "-3"],
            "--tail-bytes must be non-negative",
        ),
        (["--url", "http://h:1", "--machine", "m", "--slots", "0"], "--slots must be positive"),
        (
            ["--url", "http://h:1", "--machine", "m", "--notice-url", "file:///x"],
            "--notice-url must be",
        ),
    ],
)
def test_a_bad_command_line_exits_2_naming_what_is_wrong(argv: list[str], said: str) -> None:
    """As a provider would start it: a process, its stderr and exit code."""
    done = start(str(AGENT), *argv)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stderr.startswith("usage: agent.py")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080/",
        "http://Host.Example/a/b/",
        "https://x:443/p",
        "http://[::1]:9000/v",
        "http://[FE80::1]",
        "http://user:pw@h:81/x",
        "HTTP://h",
        "http://h:0",
        "http://h/?q=1",
        "http://h:65535#f",
    ],
)
def test_a_url_splits_as_urlsplit_splits_it(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    assert agent.split_url(url) == (parts.scheme, parts.hostname, parts.port, parts.path)


@pytest.mark.parametrize("url", ["ftp://h", "http://", "h:80", "http://h:8x/", "http://h:65536"])
def test_a_url_that_is_no_http_address_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"must be http://|bad port"):
        agent.split_url(url)


@pytest.mark.parametrize("how", ["source", "bytecode"])
def test_an_agent_starts_without_the_libraries_it_rarely_needs(tmp_path: Path, how: str) -> None:
    """Started as the local provider starts it (``python -S``, the bytecode it compiles
    into the run directory), an agent that reaches no controller imports neither
    ``http.client`` nor ``argparse``, ``tempfile``, ``shutil``, ``subprocess``, ``glob``
    or ``urllib``: with them it started in about 95 ms of CPU here, without in 36."""
    script = AGENT if how == "source" else compiled_agent(tmp_path, sys.executable)
    assert script.suffix == (".py" if how == "source" else ".pyc")
    probe = (
        "import runpy, sys; sys.argv = [sys.argv[1], *sys.argv[2:]]\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    unreachable = ["--url", "http://127.0.0.1:9", "--machine", "m", "--orphan-after-s", "0.01"]
    done = start("-c", probe, str(script), *unreachable)
    assert "controller unreachable" in done.stderr, done.stderr
    loaded = set(done.stdout.split())
    assert "socket" in loaded  # the probe sees the agent's imports
    heavy = {
        "http.client",
        "argparse",
        "tempfile",
        "shutil",
        "subprocess",
        "glob",
        "urllib.parse",
        "email",
    }
    assert loaded & heavy == set()


def test_the_local_provider_compiles_the_agent_only_for_its_own_python(tmp_path: Path) -> None:
    assert compiled_agent(tmp_path / "a", sys.executable) == tmp_path / "a" / "agent.pyc"
    assert (tmp_path / "a" / "agent.pyc").read_bytes()[:4] == __import__(
        "importlib.util"
    ).util.MAGIC_NUMBER
    assert compiled_agent(tmp_path / "b", "/usr/bin/false") == AGENT
    assert not (tmp_path / "b").exists()
