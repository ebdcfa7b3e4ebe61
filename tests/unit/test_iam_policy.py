"""The controller's IAM policy: least privilege, and the same in the JSON and the template.

``infra/iam-policy.json`` is what an operator attaches by hand; the managed policy in
``infra/cloudformation.yaml`` is what the stack creates. Both must say the same thing,
and what they say must keep the controller to its own runs: it launches only instances
and volumes that carry the run tag, tags only at launch (so it cannot put the run tag
on someone else's instance and then terminate it), terminates only tagged instances and
passes only the worker role. The tag keys it may set are exactly those a launch of ours
sets (``ec2.TAG_KEYS``: the run's, and the cost allocation tags of ``cost_tags``).
These tests read the documents; AWS's evaluation of them is not emulated here (moto does
not enforce IAM), so they check shape, not effect.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.cost_tags import COST_TAG_KEYS
from autoscaler.providers.ec2 import TAG_KEYS

INFRA = Path(__file__).resolve().parents[2] / "infra"
POLICY_JSON = INFRA / "iam-policy.json"
TEMPLATE = INFRA / "cloudformation.yaml"

RUN_TAG = "autoscaler:run"
OUR_TAG_KEYS = set(TAG_KEYS)
# The placeholders iam-policy.json has where the template has the stack's own values.
PLACEHOLDER_PARTITION = "aws"
PLACEHOLDER_WORKER_ROLE_ARN = "arn:aws:iam::111122223333:role/autoscaler-worker"

Statement = dict[str, Any]


def load_policy() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(POLICY_JSON.read_text(encoding="utf-8"))
    return data


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements() -> list[Statement]:
    return list(load_policy()["Statement"])


def grants(stmt: Statement, action: str) -> bool:
    """Whether the statement's actions cover ``action`` (IAM wildcards, any case)."""
    return any(fnmatchcase(action.lower(), a.lower()) for a in as_list(stmt["Action"]))


def covers(stmt: Statement, resource_type: str) -> bool:
    """Whether the statement's resources cover EC2 resources of ``resource_type``."""
    probe = f"arn:aws:ec2:us-east-1:111122223333:{resource_type}/x-0123"
    image_probe = f"arn:aws:ec2:us-east-1::{resource_type}/x-0123"
    return any(
        fnmatchcase(probe, r) or fnmatchcase(image_probe, r) for r in as_list(stmt["Resource"])
    )


def condition(stmt: Statement, operator: str, key: str) -> Any:
    """The value the statement's condition ``operator`` requires of ``key``, or None."""
    return stmt.get("Condition", {}).get(operator, {}).get(key)


def lets_tag_with(stmt: Statement, keys: set[str]) -> bool:
    """Whether the statement's tag conditions let a request set tags of ``keys``, as IAM
    evaluates them: ``ForAllValues:StringEquals`` on ``aws:TagKeys`` holds when every key
    of the request is one it lists, and a ``Null: false`` on ``aws:RequestTag/K`` when
    the request sets K."""
    allowed = condition(stmt, "ForAllValues:StringEquals", "aws:TagKeys")
    if allowed is not None and not keys <= set(as_list(allowed)):
        return False
    required = {
        k.removeprefix("aws:RequestTag/")
        for k, v in stmt.get("Condition", {}).get("Null", {}).items()
        if k.startswith("aws:RequestTag/") and v == "false"
    }
    return required <= keys


# --- the document as a whole -------------------------------------------------------------


def test_policy_is_well_formed() -> None:
    policy = load_policy()
    assert policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)), f"duplicate Sids: {sids}"
    for stmt in policy["Statement"]:
        # Allow-only, and no inverted elements: NotAction/NotResource grant by omission.
        assert stmt["Effect"] == "Allow", stmt["Sid"]
        assert set(stmt) <= {"Sid", "Effect", "Action", "Resource", "Condition"}, stmt["Sid"]


def test_no_wildcard_action_but_describe() -> None:
    for stmt in statements():
        for action in as_list(stmt["Action"]):
            _, _, name = action.partition(":")
            assert action != "*", stmt["Sid"]
            assert name != "*", f"{stmt['Sid']}: {action}"
            if "*" in name:
                assert action == "ec2:Describe*", f"{stmt['Sid']}: {action}"


def test_only_read_and_pricing_actions_on_every_resource() -> None:
    """Resource "*" is for actions without resource-level permissions, and only those."""
    for stmt in statements():
        if "*" in as_list(stmt["Resource"]):
            assert set(as_list(stmt["Action"])) <= {"ec2:Describe*", "pricing:GetProducts"}, stmt[
                "Sid"
            ]


# --- launching ----------------------------------------------------------------------------


def test_run_instances_on_instances_and_volumes_requires_the_run_tag() -> None:
    launching = [s for s in statements() if grants(s, "ec2:RunInstances")]
    for resource_type in ("instance", "volume"):
        granting = [s for s in launching if covers(s, resource_type)]
        assert granting, f"nothing lets RunInstances create a {resource_type}"
        for stmt in granting:
            assert condition(stmt, "Null", f"aws:RequestTag/{RUN_TAG}") == "false", stmt["Sid"]
            keys = condition(stmt, "ForAllValues:StringEquals", "aws:TagKeys")
            assert keys is not None, f"{stmt['Sid']}: any tag key may be set"
            assert set(as_list(keys)) == OUR_TAG_KEYS, stmt["Sid"]


def test_instances_must_require_imdsv2() -> None:
    for stmt in statements():
        if grants(stmt, "ec2:RunInstances") and covers(stmt, "instance"):
            assert condition(stmt, "StringEquals", "ec2:MetadataHttpTokens") == "required"


def test_run_instances_may_use_the_resources_it_needs() -> None:
    """AWS's resource list for RunInstances: without these the launch is refused."""
    launching = [s for s in statements() if grants(s, "ec2:RunInstances")]
    for resource_type in (
        "image",
        "snapshot",
        "subnet",
        "security-group",
        "key-pair",
        "network-interface",
        "spot-instances-request",
    ):
        assert any(covers(s, resource_type) and "Condition" not in s for s in launching), (
            resource_type
        )


def test_tags_only_at_launch() -> None:
    tagging = [s for s in statements() if grants(s, "ec2:CreateTags")]
    assert tagging, "RunInstances with TagSpecifications needs ec2:CreateTags"
    for stmt in tagging:
        assert as_list(condition(stmt, "StringEquals", "ec2:CreateAction")) == ["RunInstances"]
        keys = condition(stmt, "ForAllValues:StringEquals", "aws:TagKeys")
        assert set(as_list(keys)) == OUR_TAG_KEYS, stmt["Sid"]


def test_the_cost_tags_are_among_the_keys_a_launch_sets() -> None:
    assert set(COST_TAG_KEYS) == {"autoscaler:project", "autoscaler:job", "autoscaler:user"}
    assert set(COST_TAG_KEYS) < OUR_TAG_KEYS
    assert "autoscaler:provider" in OUR_TAG_KEYS  # a run of several providers adds it


def tagging_statements() -> list[Statement]:
    """The statements that let a launch create tagged instances and volumes, and tag them."""
    return [
        s
        for s in statements()
        if (grants(s, "ec2:RunInstances") and (covers(s, "instance") or covers(s, "volume")))
        or grants(s, "ec2:CreateTags")
    ]


def test_a_launch_may_set_the_run_tags_and_the_cost_tags() -> None:
    run = {"Name", RUN_TAG, "autoscaler:launch", "autoscaler:type"}
    for keys in (run, run | set(COST_TAG_KEYS), OUR_TAG_KEYS):
        for stmt in tagging_statements():
            assert lets_tag_with(stmt, keys), f"{stmt['Sid']} refuses {sorted(keys)}"


@pytest.mark.parametrize("other", ["team", "autoscaler:owner", "Project", "autoscaler:Project"])
def test_a_launch_may_set_no_other_tag_key(other: str) -> None:
    """Tag keys are case-sensitive: a key spelled otherwise is another key."""
    for stmt in tagging_statements():
        assert not lets_tag_with(stmt, OUR_TAG_KEYS | {other}), f"{stmt['Sid']} lets {other}"


def test_a_launch_without_the_run_tag_is_refused_whatever_else_it_sets() -> None:
    for stmt in tagging_statements():
        if grants(stmt, "ec2:RunInstances"):
            assert not lets_tag_with(stmt, OUR_TAG_KEYS - {RUN_TAG}), stmt["Sid"]


def test_tags_cannot_be_removed() -> None:
    assert not [s["Sid"] for s in statements() if grants(s, "ec2:DeleteTags")]


# --- the run's instances ------------------------------------------------------------------


@pytest.mark.parametrize("action", ["ec2:TerminateInstances", "ec2:GetConsoleOutput"])
def test_acts_only_on_instances_with_the_run_tag(action: str) -> None:
    granting = [s for s in statements() if grants(s, action)]
    assert granting, f"nothing grants {action}"
    for stmt in granting:
        assert "*" not in as_list(stmt["Resource"]), stmt["Sid"]
        required = [
            condition(stmt, "Null", f"{prefix}:ResourceTag/{RUN_TAG}") for prefix in ("aws", "ec2")
        ]
        assert "false" in required, f"{stmt['Sid']}: {action} without the run tag condition"


def test_passes_only_the_worker_role_to_ec2() -> None:
    passing = [s for s in statements() if grants(s, "iam:PassRole")]
    assert passing
    for stmt in passing:
        for resource in as_list(stmt["Resource"]):
            assert "*" not in resource, f"{stmt['Sid']}: PassRole on {resource}"
        assert condition(stmt, "StringEquals", "iam:PassedToService") == "ec2.amazonaws.com"


def test_grants_the_provider_s_other_calls() -> None:
    """Describe (filtered by the run tag, which IAM cannot check) and the price list."""
    for action in ("ec2:DescribeInstances", "ec2:DescribeInstanceAttribute", "pricing:GetProducts"):
        assert [s for s in statements() if grants(s, action)], action


# --- the template's copy --------------------------------------------------------------


def resolve(value: Any) -> Any:
    """The template's policy with the JSON file's placeholders for the stack's values."""
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "Fn::Sub" in value:
        text = value["Fn::Sub"]
        assert isinstance(text, str), f"unexpected Fn::Sub form: {value}"
        text = text.replace("${AWS::Partition}", PLACEHOLDER_PARTITION)
        assert "${" not in text, f"an Fn::Sub this test does not resolve: {text}"
        return text
    if "Fn::GetAtt" in value:
        assert value["Fn::GetAtt"] == ["WorkerRole", "Arn"], f"unexpected Fn::GetAtt: {value}"
        return PLACEHOLDER_WORKER_ROLE_ARN
    intrinsic = [k for k in value if k == "Ref" or k.startswith("Fn::")]
    assert not intrinsic, f"an intrinsic this test does not resolve: {value}"
    return {k: resolve(v) for k, v in value.items()}


def test_template_policy_is_the_json_policy() -> None:
    template = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    resource = template["Resources"]["ControllerPolicy"]
    assert resource["Type"] == "AWS::IAM::ManagedPolicy"
    assert resolve(resource["Properties"]["PolicyDocument"]) == load_policy()


def test_resolve_notices_a_difference() -> None:
    """The comparison above is not vacuous: one changed condition value breaks it."""
    template = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    document = template["Resources"]["ControllerPolicy"]["Properties"]["PolicyDocument"]
    for stmt in document["Statement"]:
        if stmt["Sid"] == "ManageOnlyRunInstances":
            stmt["Condition"]["Null"][f"aws:ResourceTag/{RUN_TAG}"] = "true"
    assert resolve(document) != load_policy()
