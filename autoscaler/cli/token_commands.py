"""``autoscaler token create|revoke|list``: the tokens of a service's users
(``autoscaler.service.users``), managed on the service's machine in its state directory,
whether the service runs or not: a token made works at once, a token revoked stops at
once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from autoscaler.cli.app import Commands, app, console
from autoscaler.cli.service_commands import StateDir, _state_dir

if TYPE_CHECKING:
    from autoscaler.service.users import Role

token_app = typer.Typer(
    cls=Commands,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Make, revoke and list the tokens of the service's users (only their hashes are "
    "kept, in the state directory).",
)
app.add_typer(token_app, name="token")

ServiceFile = Annotated[
    Path | None,
    typer.Option(
        "--service",
        help="the service's YAML file: its users (service.users) give a user's role",
    ),
]


def _roster(service: Path | None) -> dict[str, Role] | None:
    """The roles the service config ``service`` gives its users; None without one."""
    if service is None:
        return None
    from autoscaler.config.service_schema import load_service_config
    from autoscaler.service.users import Role

    return {u.name: Role(u.role) for u in load_service_config(service).users}


@token_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="the user's name")],
    role: Annotated[
        str | None,
        typer.Option(
            help="admin, submit or read (default: the role the --service config gives NAME)"
        ),
    ] = None,
    state_dir: StateDir = None,
    service: ServiceFile = None,
) -> None:
    """Make a token for the user NAME and print it, once: only its hash is kept. Give it
    to the user, who sets AUTOSCALER_TOKEN to it (or keeps it in a file for
    --token-file)."""
    from autoscaler.service.users import issue, role_of

    asked = None if role is None else role_of(role, "--role")
    token, record = issue(_state_dir(state_dir), name, asked, _roster(service), time.time())
    console.print(token, markup=False, soft_wrap=True)
    Console(stderr=True, highlight=False).print(
        f"token {record.id} for {record.user} (role {record.role.value}): shown this once",
        markup=False,
        soft_wrap=True,
    )


@token_app.command("revoke")
def revoke(
    name_or_id: Annotated[str, typer.Argument(help="a token's id, or a user (all its tokens)")],
    state_dir: StateDir = None,
) -> None:
    """Revoke a token (by its id, as `token list` shows it) or every token of a user: a
    request with it is refused from now on."""
    from autoscaler.service.users import revoke as revoke_tokens

    for record in revoke_tokens(_state_dir(state_dir), name_or_id, time.time()):
        console.print(f"revoked token {record.id} of {record.user}", markup=False)


@token_app.command("list")
def list_tokens(state_dir: StateDir = None, service: ServiceFile = None) -> None:
    """List the tokens: id, user, role and when each was made (never the token). With
    --service, the role is the one the service gives (its config's, where it lists the
    user)."""
    from rich.table import Table

    from autoscaler.cli.text import when
    from autoscaler.service.users import listed

    roster = _roster(service) or {}
    table = Table(box=None, header_style="bold")
    for col in ("id", "user", "role", "created"):
        table.add_column(col, no_wrap=True)
    now = time.time()
    for record in listed(_state_dir(state_dir)):
        role = roster.get(record.user, record.role)
        shown = role.value if role is record.role else f"{role.value} (made as {record.role})"
        table.add_row(record.id, record.user, shown, when(record.created, now))
    wide = console if console.is_terminal else Console(highlight=False, width=200)
    wide.print(table)
