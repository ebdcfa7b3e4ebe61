"""Problems with a config file as short lines that name the field: pydantic's
validation errors (``machine_types[1].price: must be greater than 0 (got -3)``) and
YAML's syntax errors."""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

_TYPE_MESSAGES = {
    "missing": "missing (required)",
    "extra_forbidden": "unknown field",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "path_type": "must be a file path",
    "finite_number": "must be a finite number",
}

_QUIET = ("bag.env.",)
"""Values under these paths (a job's bag's too) may be secrets: errors name the field but
never the value."""

_JOB_PREFIX = re.compile(r"^jobs\[\d+\]\.")

_UNION_HINTS = {
    "bag.sweep.": "must be a list of values or a range {start, stop, step}",
}


def validation_problems(exc: ValidationError, data: object) -> list[str]:
    """One short line per problem in ``exc``: ``field.path[1].name: message (got value)``.

    ``data`` is the input that was validated: walking it tells a field name from the
    tag pydantic puts in the location of an error inside a union. The alternatives of a
    plain (untagged) union that all fail on their type are folded into one line.
    """
    problems: list[str] = []
    unions: dict[str, list[tuple[ErrorDetails, str]]] = {}
    union_inputs: dict[str, object] = {}
    for error in exc.errors():
        where = _locate(error, data)
        if where.union_path is None:
            problems.append(_problem(error, where.path))
        else:
            unions.setdefault(where.union_path, []).append((error, where.path))
            union_inputs[where.union_path] = where.union_input
    for union_path, errors in unions.items():
        specific = [(e, p) for e, p in errors if not _is_type_error(e)]
        if specific or len(errors) == 1:
            problems.extend(_problem(e, p) for e, p in specific or errors)
            continue
        hint = next(
            (
                h
                for prefix, h in _UNION_HINTS.items()
                if _JOB_PREFIX.sub("", union_path).startswith(prefix)
            ),
            "does not match any allowed form",
        )
        problems.append(f"{union_path}: {hint}{_got(union_inputs[union_path], hint)}")
    return list(dict.fromkeys(problems))


@dataclass(frozen=True, slots=True)
class _Where:
    path: str  # dotted, with list indices: machine_types[1].price
    union_path: str | None  # where a plain union starts on the way, if one does
    union_input: object  # the input at union_path


def _locate(error: ErrorDetails, data: object) -> _Where:
    """Follow ``error``'s location through ``data``.

    A segment that is neither a key nor an index of the input there is a union tag:
    the discriminator value of a tagged union (it is one of the mapping's values and is
    dropped) or the member name of a plain union (the union's path is noted).
    """
    loc = list(error["loc"])
    if error["type"] == "invalid_key":
        loc = loc[:-1]  # the last segment is the key's position, not a name
    parts: list[str] = []
    node: object = data
    union_path: str | None = None
    union_input: object = None
    for i, segment in enumerate(loc):
        if segment == "[key]":
            continue
        if isinstance(node, dict) and segment in node:
            parts.append(f".{segment}" if segment != "" else ".''")  # an empty key, named
            node = node[segment]
        elif isinstance(segment, int) and isinstance(node, list) and 0 <= segment < len(node):
            parts.append(f"[{segment}]")
            node = node[segment]
        elif i == len(loc) - 1 and error["type"] == "missing":
            parts.append(f".{segment}")
        elif isinstance(node, dict) and segment in node.values():
            continue
        elif union_path is None:
            union_path, union_input = _join(parts), node
    return _Where(_join(parts), union_path, union_input)


def _join(parts: list[str]) -> str:
    return "".join(parts).removeprefix(".")


def _is_type_error(error: ErrorDetails) -> bool:
    kind = error["type"]
    return kind.endswith(("_type", "_parsing")) or kind == "int_from_float"


def _problem(error: ErrorDetails, path: str) -> str:
    message = _message(error)
    line = f"{path}: {message}" if path else message
    value = error.get("input")
    if error["type"] in ("extra_forbidden", "missing", "invalid_key") or not error["loc"]:
        return line  # an unknown field's value is not ours to echo; a model's input is all
    if _JOB_PREFIX.sub("", path).startswith(_QUIET):
        return line
    if error["type"] == "value_error" and isinstance(value, list | dict):
        return line  # a check across items says which item it means
    return line + _got(value, message)


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    if kind == "invalid_key":
        message = f"field name {error.get('input')!r} is not a string"
        if isinstance(error.get("input"), bool):
            message += " (YAML reads yes, no, on and off as true/false: quote it)"
        return message
    if "[key]" in error["loc"]:
        return "names must be strings"
    if kind in _TYPE_MESSAGES:
        return _TYPE_MESSAGES[kind]
    if kind == "union_tag_invalid":
        name, tags = _unquote(ctx.get("discriminator")), ctx.get("expected_tags")
        return f"unknown {name} {ctx.get('tag')!r} (use one of {tags})"
    if kind == "union_tag_not_found":
        return f"needs a {_unquote(ctx.get('discriminator'))} field"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {ctx.get('pattern')}"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return f"must have at least {n} item{'' if n == 1 else 's'}"
    message = error["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message.replace("Input should be ", "must be ", 1)


def _unquote(value: object) -> str:
    return str(value).strip("'\"")


def _got(value: object, message: str) -> str:
    """`` (got <value>)``, unless the message shows it already or it is a whole mapping."""
    if isinstance(value, dict):
        return ""
    shown = repr(value)
    if isinstance(value, str) and shown in message:
        return ""
    if len(shown) > 60:
        shown = shown[:56] + " ..."
    return f" (got {shown})"


def yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = exc.problem or "malformed"
        return f"malformed YAML at line {mark.line + 1}, column {mark.column + 1}: {what}"
    return f"malformed YAML: {exc}"
