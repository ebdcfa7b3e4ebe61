"""Agents' credentials (``bootstrap.credentials``) and which runs serve agents https
(``run.wiring.direct_hosts``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.bootstrap.credentials import launch_of, launch_token, machine_token
from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.providers.kind import RunContext, agent_settings
from autoscaler.run.wiring import direct_hosts

SECRET = "the-run-secret"


def test_each_machine_has_its_own_token_and_the_secret_derives_it_again() -> None:
    a, b = machine_token(SECRET, "i-1"), machine_token(SECRET, "i-2")
    assert a != b
    assert machine_token(SECRET, "i-1") == a
    assert machine_token("another-run", "i-1") != a
    assert SECRET not in a


def test_a_launch_token_names_its_launch_and_cannot_be_forged() -> None:
    token = launch_token(SECRET, "L7")
    assert launch_of(SECRET, token) == "L7"
    assert launch_of("another-run", token) is None
    assert launch_of(SECRET, "L8" + token[2:]) is None  # another launch, the same MAC
    assert launch_of(SECRET, "L7." + "0" * 64) is None
    assert launch_of(SECRET, machine_token(SECRET, "L7")) is None  # no launch in it
    assert launch_of(SECRET, "") is None


EC2 = (
    "{kind: ec2, region: us-east-1, ami: ami-0abc, BOOT, types: {TYPE: {instance_type: c5.large}}}"
)
TWO = """\
name: two
bag: {synthetic: 30}
constraint: {budget: 100}
providers:
  campus: CAMPUS
  east: EAST
machine_types:
  - {name: node, provider: campus, price: 0.5, max_count: 20}
  - {name: c5, provider: east, price: 3, max_count: 10}
"""
USER_DATA = "bootstrap: user-data, controller_url: 'https://10.1.2.3:8443'"
SSH = "bootstrap: ssh, ssh: {key_file: k}"


def config(tmp_path: Path, campus: str, east: str) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(TWO.replace("CAMPUS", campus).replace("EAST", east), encoding="utf-8")
    return load_config(path)


def test_a_user_data_provider_makes_the_dispatcher_serve_https_for_its_host(
    tmp_path: Path,
) -> None:
    east = EC2.replace("BOOT", USER_DATA).replace("TYPE", "c5")
    cfg = config(tmp_path, "{kind: local}", east)
    assert direct_hosts(cfg) == ["10.1.2.3"]
    plain = config(tmp_path, "{kind: local}", "{kind: local}")
    assert direct_hosts(plain) == []


def test_an_ssh_bootstrap_beside_a_user_data_one_is_refused(tmp_path: Path) -> None:
    campus = EC2.replace("BOOT", SSH).replace("TYPE", "node")
    east = EC2.replace("BOOT", USER_DATA).replace("TYPE", "c5")
    with pytest.raises(AutoscalerError, match="bootstrap: ssh cannot share a run"):
        direct_hosts(config(tmp_path, campus, east))


def test_a_user_data_controller_url_must_be_https(tmp_path: Path) -> None:
    """The dispatcher serves those agents https only: an http URL is a clear config error."""
    east = EC2.replace("BOOT", USER_DATA.replace("https://", "http://")).replace("TYPE", "c5")
    with pytest.raises(ConfigError, match=r"controller_url 'http://10.1.2.3:8443' must be https"):
        config(tmp_path, "{kind: local}", east)


def test_local_agents_of_an_https_run_pin_its_ca_and_get_their_machines_token(
    tmp_path: Path,
) -> None:
    """Beside a user-data provider the dispatcher is https: a local agent is started with
    --ca-file (the run's ca.pem) and its own machine's token, never the secret."""
    cfg = config(tmp_path, "{kind: local}", EC2.replace("BOOT", USER_DATA).replace("TYPE", "c5"))
    ctx = RunContext(
        BillingModel("fixed", 3600.0),
        "run-1",
        tmp_path,
        SECRET,
        "https://127.0.0.1:8443",
        tmp_path,
        lambda: 0.0,
        ca_pem="-----BEGIN CERTIFICATE-----\n",
    )
    command = agent_settings(cfg, ctx, python=None, workdir=None).command("node-L0-0")
    argv = list(command.argv)
    assert argv[argv.index("--ca-file") + 1] == str(tmp_path / "ca.pem")
    assert dict(command.env) == {"AUTOSCALER_TOKEN": machine_token(SECRET, "node-L0-0")}
    plain = RunContext(
        *[getattr(ctx, f) for f in ("billing", "run_id", "run_dir", "token")],
        "http://127.0.0.1:8443",
        tmp_path,
        lambda: 0.0,
    )
    assert "--ca-file" not in agent_settings(cfg, plain, python=None, workdir=None).flags()


def test_the_runs_ca_is_kept_and_one_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    """A resumed run keeps its CA (its agents pin it), its key readable by the owner
    only; a CA whose files are damaged is an error naming the file, not a traceback."""
    from autoscaler.bootstrap.tls import CA_CERT, CA_KEY, run_ca

    first = run_ca(tmp_path, ["10.0.0.2"])
    assert run_ca(tmp_path, ["10.0.0.3"]).ca_pem == first.ca_pem
    assert (tmp_path / CA_KEY).stat().st_mode & 0o777 == 0o600
    (tmp_path / CA_KEY).write_text("not a key\n")
    with pytest.raises(AutoscalerError, match=CA_KEY):
        run_ca(tmp_path, ["10.0.0.2"])
    (tmp_path / CA_CERT).write_bytes(b"\xff")
    with pytest.raises(AutoscalerError, match=CA_CERT):
        run_ca(tmp_path, ["10.0.0.2"])
