"""The deployment files against real tools: the template deployed to a moto server, the
policy through moto's IAM policy validator, the unit through ``systemd-analyze verify``
and its command line through the real CLI.

What this does not verify: that AWS grants or refuses what the policy says. moto does
not evaluate IAM policies (every call is allowed), so authorization is checked only by
reading the policy (tests/unit/test_iam_policy.py). moto's CloudFormation has no
``AWS::EC2::KeyPair`` either, so the stack is deployed with an existing key pair (the
``KeyName`` parameter); the branch that creates one is checked by cfn-lint only.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from autoscaler.run.live_runs import STATE_DIR_ENV
from tests.integration.services import MotoServer, fake_aws_credentials

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
TEMPLATE = INFRA / "cloudformation.yaml"
POLICY_JSON = INFRA / "iam-policy.json"
UNIT = INFRA / "autoscaler.service"
REGION = "us-east-1"
CONTROLLER_CIDR = "203.0.113.7/32"
PLACEHOLDER_WORKER_ROLE_ARN = "arn:aws:iam::111122223333:role/autoscaler-worker"


# --- the template on moto ----------------------------------------------------------------


@pytest.fixture
def aws(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """A clean emulated account, reached with fake credentials only."""
    fake_aws_credentials(monkeypatch)
    moto.reset()
    yield moto
    moto.reset()


def client(server: MotoServer, service: str) -> Any:
    factory: Any = boto3.client  # typed per service name; ours is a plain string
    return factory(service, endpoint_url=server.endpoint, region_name=REGION)


def default_network(ec2: Any) -> tuple[str, list[str]]:
    """The default VPC moto creates, and two of its subnets (in a stable order)."""
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    vpc = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    ids = sorted(s["SubnetId"] for s in subnets)[:2]
    assert len(ids) == 2, subnets
    return vpc, ids


def import_key(ec2: Any, name: str) -> None:
    """An existing key pair, as an operator would have imported it (public half only)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public)


def deploy(server: MotoServer, name: str, **parameters: str) -> dict[str, str]:
    """Create the stack, wait for CREATE_COMPLETE, return its outputs by key."""
    cfn = client(server, "cloudformation")
    cfn.create_stack(
        StackName=name,
        TemplateBody=TEMPLATE.read_text(encoding="utf-8"),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    cfn.get_waiter("stack_create_complete").wait(
        StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def expected_policy(worker_role_arn: str) -> dict[str, Any]:
    """infra/iam-policy.json with the stack's worker role in place of the placeholder."""
    text = POLICY_JSON.read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text.replace(PLACEHOLDER_WORKER_ROLE_ARN, worker_role_arn))
    return data


def test_stack_outputs_are_real_resources(aws: MotoServer) -> None:
    ec2, iam = client(aws, "ec2"), client(aws, "iam")
    vpc, subnets = default_network(ec2)
    import_key(ec2, "autoscaler-test")

    out = deploy(
        aws,
        "autoscaler",
        ControllerCidr=CONTROLLER_CIDR,
        VpcId=vpc,
        SubnetIds=",".join(subnets),
        KeyName="autoscaler-test",
    )

    # ec2.security_groups: SSH from the controller's address, nothing else in.
    group = ec2.describe_security_groups(GroupIds=[out["SecurityGroupId"]])["SecurityGroups"][0]
    assert group["VpcId"] == vpc
    assert len(group["IpPermissions"]) == 1, group["IpPermissions"]
    rule = group["IpPermissions"][0]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 22, 22)
    assert [r["CidrIp"] for r in rule["IpRanges"]] == [CONTROLLER_CIDR]
    assert not rule.get("UserIdGroupPairs")
    assert not rule.get("Ipv6Ranges")
    # user-data mode is off: no controller group.
    assert "ControllerSecurityGroupId" not in out

    # ec2.key_name: the existing key pair, passed through.
    assert out["KeyName"] == "autoscaler-test"
    assert ec2.describe_key_pairs(KeyNames=[out["KeyName"]])["KeyPairs"]

    # ec2.instance_profile: the worker role, trusted by EC2, with no permissions.
    profile = iam.get_instance_profile(InstanceProfileName=out["InstanceProfileName"])
    roles = profile["InstanceProfile"]["Roles"]
    assert [r["Arn"] for r in roles] == [out["WorkerRoleArn"]]
    role_name = roles[0]["RoleName"]
    trust = roles[0]["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    assert iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"] == []
    assert iam.list_role_policies(RoleName=role_name)["PolicyNames"] == []

    # The controller policy: the template rendered by the stack is iam-policy.json, with
    # this stack's worker role as the only role it may pass. Attached to nothing.
    policy = iam.get_policy(PolicyArn=out["ControllerPolicyArn"])["Policy"]
    assert policy["AttachmentCount"] == 0
    version = iam.get_policy_version(PolicyArn=policy["Arn"], VersionId=policy["DefaultVersionId"])[
        "PolicyVersion"
    ]
    document = version["Document"]
    document = json.loads(document) if isinstance(document, str) else document
    assert document == expected_policy(out["WorkerRoleArn"])

    # ec2.subnets, in the order given.
    assert out["Subnets"].split(",") == subnets

    # And a launch as the EC2 provider makes it works with these values.
    image = ec2.describe_images()["Images"][0]["ImageId"]
    tags = [
        {"Key": "autoscaler:run", "Value": "run-1"},
        {"Key": "autoscaler:launch", "Value": "token-1"},
        {"Key": "autoscaler:type", "Value": "small"},
        {"Key": "Name", "Value": "autoscaler run-1 small"},
    ]
    launched = ec2.run_instances(
        ImageId=image,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        ClientToken="token-1",
        KeyName=out["KeyName"],
        SecurityGroupIds=[out["SecurityGroupId"]],
        SubnetId=out["Subnets"].split(",")[0],
        IamInstanceProfile={"Name": out["InstanceProfileName"]},
        InstanceInitiatedShutdownBehavior="terminate",
        MetadataOptions={"HttpTokens": "required"},
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    )["Instances"]
    assert len(launched) == 1
    found = ec2.describe_instances(Filters=[{"Name": "tag:autoscaler:run", "Values": ["run-1"]}])[
        "Reservations"
    ]
    instance = found[0]["Instances"][0]
    assert instance["InstanceId"] == launched[0]["InstanceId"]
    assert [g["GroupId"] for g in instance["SecurityGroups"]] == [out["SecurityGroupId"]]
    assert instance["SubnetId"] == subnets[0]
    assert instance["KeyName"] == "autoscaler-test"
    assert instance["IamInstanceProfile"]["Arn"] == profile["InstanceProfile"]["Arn"]


def test_user_data_mode_and_controller_role(aws: MotoServer) -> None:
    """DispatcherPort opens that port on a controller group, to the workers' group only;
    ControllerRoleName gets the controller policy attached."""
    ec2, iam = client(aws, "ec2"), client(aws, "iam")
    vpc, subnets = default_network(ec2)
    import_key(ec2, "autoscaler-test")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    iam.create_role(RoleName="autoscaler-controller", AssumeRolePolicyDocument=json.dumps(trust))

    out = deploy(
        aws,
        "autoscaler-userdata",
        ControllerCidr=CONTROLLER_CIDR,
        VpcId=vpc,
        SubnetIds=subnets[0],
        KeyName="autoscaler-test",
        DispatcherPort="8750",
        ControllerRoleName="autoscaler-controller",
    )

    group = ec2.describe_security_groups(GroupIds=[out["ControllerSecurityGroupId"]])[
        "SecurityGroups"
    ][0]
    assert len(group["IpPermissions"]) == 1, group["IpPermissions"]
    rule = group["IpPermissions"][0]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 8750, 8750)
    assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [out["SecurityGroupId"]]
    assert not rule.get("IpRanges"), "the dispatcher must not be open to an address range"
    # The workers' own group is unchanged: still SSH from the controller only.
    workers = ec2.describe_security_groups(GroupIds=[out["SecurityGroupId"]])["SecurityGroups"]
    assert [(p["FromPort"], p["ToPort"]) for p in workers[0]["IpPermissions"]] == [(22, 22)]

    attached = iam.list_attached_role_policies(RoleName="autoscaler-controller")
    assert [p["PolicyArn"] for p in attached["AttachedPolicies"]] == [out["ControllerPolicyArn"]]
    assert out["Subnets"] == subnets[0]


def test_policy_json_passes_the_iam_validator(aws: MotoServer) -> None:
    """moto checks a policy document's grammar as IAM does (not its effect)."""
    iam = client(aws, "iam")
    text = POLICY_JSON.read_text(encoding="utf-8")
    created = iam.create_policy(PolicyName="autoscaler-controller", PolicyDocument=text)
    assert created["Policy"]["Arn"].endswith(":policy/autoscaler-controller")
    # The validator is not a rubber stamp: a statement with a bad effect is refused.
    broken = json.loads(text)
    broken["Statement"][0]["Effect"] = "Permit"
    with pytest.raises(ClientError) as info:
        iam.create_policy(PolicyName="broken", PolicyDocument=json.dumps(broken))
    assert info.value.response["Error"]["Code"] == "MalformedPolicyDocument"


def test_template_passes_cfn_lint() -> None:
    """cfn-lint checks every resource against AWS's schemas, KeyPair creation included.
    Errors and warnings count; informational suggestions (I rules) do not."""
    cfnlint = pytest.importorskip("cfnlint.api", reason="cfn-lint is not installed")
    problems = cfnlint.lint_all(TEMPLATE.read_text(encoding="utf-8"))
    assert [str(p) for p in problems if not p.rule.id.startswith("I")] == []


# --- the systemd unit -------------------------------------------------------------------


def unit() -> configparser.ConfigParser:
    # strict=False: systemd allows a key more than once (ExecStart= resets, for one).
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT, encoding="utf-8")
    return parser


def exec_start() -> list[str]:
    return shlex.split(unit()["Service"]["ExecStart"])


def test_unit_serves_and_stops_gracefully_and_restarts_on_failure() -> None:
    unit_ = unit()
    service = unit_["Service"]
    argv = exec_start()
    assert Path(argv[0]).is_absolute(), argv[0]
    assert argv[0] == "/opt/autoscaler/.venv/bin/autoscaler"
    assert argv[1:3] == ["serve", "/etc/autoscaler/service.yaml"]
    assert argv[3:] == ["--state-dir", "/var/lib/autoscaler"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"  # the service first; its children after it
    minutes = re.fullmatch(r"(\d+)min", service["TimeoutStopSec"])
    assert minutes, service["TimeoutStopSec"]
    assert int(minutes.group(1)) >= 5, service["TimeoutStopSec"]
    # The journal makes a restart safe; a config error (exit 2) is not mended by one.
    assert service["Restart"] == "on-failure"
    assert "2" in service["RestartPreventExitStatus"].split()
    assert service["User"] not in ("", "root")
    assert unit_["Install"]["WantedBy"] == "multi-user.target"


def test_unit_is_sandboxed() -> None:
    service = unit()["Service"]
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "ProtectHome": "yes",
        "UMask": "0077",
    }.items():
        assert service.get(key) == value, key
    # ProtectSystem=strict makes / read-only: the state directory must be writable, and
    # ProtectHome=yes hides ~/.local/state, so the environment must name it for the CLI.
    writable = service["ReadWritePaths"].split()
    state_dir = exec_start()[exec_start().index("--state-dir") + 1]
    assert any(state_dir.startswith(w.rstrip("/")) for w in writable), (state_dir, writable)
    env = dict(pair.split("=", 1) for pair in shlex.split(service["Environment"]))
    assert env[STATE_DIR_ENV] == state_dir


def test_unit_keeps_credentials_out() -> None:
    text = UNIT.read_text(encoding="utf-8")
    assert "AWS_SECRET_ACCESS_KEY=" not in text
    env = unit()["Service"]
    assert "AWS_" not in env.get("Environment", "")
    assert env["EnvironmentFile"].startswith("-/etc/autoscaler/")


def test_unit_command_line_is_one_the_cli_accepts(tmp_path: Path) -> None:
    """ExecStart's arguments, with the example service config and a scratch state
    directory: the service comes up, answers, and SIGTERM ends it with exit 0."""
    daemon = Path(sys.executable).with_name("autoscaler")
    if not daemon.is_file():
        pytest.skip(f"{daemon} is not installed (pip install -e .)")
    state_dir = tmp_path / "state"
    here = {
        "/opt/autoscaler/.venv/bin/autoscaler": str(daemon),
        "/etc/autoscaler/service.yaml": str(ROOT / "config" / "examples" / "service.yaml"),
        "/var/lib/autoscaler": str(state_dir),
    }
    argv = [here.get(a, a) for a in exec_start()]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(300):
            if (state_dir / "api.json").is_file() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert (state_dir / "api.json").is_file(), proc.stdout.read() if proc.stdout else ""
        listed = subprocess.run(
            [str(daemon), "jobs", "--state-dir", str(state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """systemd's own parser: unknown keys and bad values are warnings, so the output
    must be empty. The daemon's path is swapped for an executable that exists here
    (verify checks it), nothing else changes."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (systemd is not a service we run)")
    text = UNIT.read_text(encoding="utf-8")
    text = text.replace("/opt/autoscaler/.venv/bin/autoscaler", sys.executable)
    copy = tmp_path / "autoscaler.service"
    copy.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [tool, "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not output.strip(), output
