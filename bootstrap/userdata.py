"""Start the worker agent from EC2 user data, when instances can reach the controller.

:func:`render_user_data` writes a ``#!/bin/sh`` script that cloud-init runs once, as root,
at the end of the first boot. It needs nothing but ``sh`` and ``python3`` on the image:

1. asks the instance metadata service (IMDSv2) for a session token
   (``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``) and, with it
   (``X-aws-ec2-metadata-token``), for the instance id; python3's urllib does the HTTP,
   so the image needs no curl. IMDS may not answer in the first seconds of a boot: it
   retries for a minute;
2. writes the agent (embedded as base64; gzip- or else xz-compressed in base85 when it
   would not fit otherwise; else as plain text in a script gzip-compressed as a whole,
   which cloud-init uncompresses before it runs it; its docstrings, the protocol spec
   among them, left out: :func:`shipped_agent`)
   its launch's token and the run's CA certificate (``ca_pem``) into ``remote_dir``
   with umask 077;
3. runs the agent in the foreground with ``--machine <instance id>``
   (``--launch-token-file``: it registers the instance first and is given its machine's
   token; ``--ca-file``: it trusts only a controller whose certificate the run's CA
   issued), its log in ``remote_dir/agent.log``; cloud-init's final stage stays busy
   while it runs, which nothing waits for;
4. when the agent exits (released, lease expired, controller gone), powers the instance
   off if asked; with the instance's shutdown behaviour set to terminate, an instance
   whose controller is gone stops costing money.

This path has no SSH tunnel: ``url`` must be reachable from the instances (a private
address of the controller, a security group allowing it).

Security. The script never holds the run's secret: each launch's user data carries that
launch's token (``bootstrap.credentials``), which can only register instance ids of that
launch, each once, for their machine tokens; a machine token speaks for its machine only
(its polls, results and task files). The channel is HTTPS, the controller's certificate
checked against the run's CA, pinned here (``ca_pem``): an agent refuses a controller
whose certificate that CA did not issue, before it sends anything. What remains weaker
than the SSH path: user data is readable by anyone allowed
``ec2:DescribeInstanceAttribute`` on the instance, and by every process on the instance
through the metadata service (``/latest/user-data``) for the instance's whole life,
unless IMDS is turned off or limited by hop count; whoever reads a launch's token before
an instance of that launch registers can register it first (the instance's own agent is
then refused, exits 2 and powers it off: the machine is lost, never spoken for). Use it
when the account and the image are trusted, and prefer the SSH bootstrap otherwise.

EC2 limits user data to 16 KB before its base64 encoding; :func:`render_user_data`
refuses to return a larger script, and returns the script gzip-compressed (bytes) when
only that fits.
"""

from __future__ import annotations

import ast
import base64
import gzip
import io
import lzma
import re
import shlex
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.bootstrap.agent_start import BootstrapError, agent_command

USER_DATA_LIMIT = 16 * 1024  # bytes, before base64 (EC2's limit)

_IMDS_CLIENT = """\
import sys, time, urllib.request
base = sys.argv[1].rstrip("/")
error = None
for attempt in range(60):
    try:
        put = urllib.request.Request(
            base + "/latest/api/token", method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
        with urllib.request.urlopen(put, timeout=5) as r:
            token = r.read().decode()
        get = urllib.request.Request(
            base + "/latest/meta-data/instance-id",
            headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(get, timeout=5) as r:
            print(r.read().decode().strip())
        sys.exit(0)
    except Exception as exc:
        error = exc
        time.sleep(1)
sys.exit("instance metadata service unreachable: %s" % error)
"""

_UNPACK = {
    "base64": "import base64,sys; sys.stdout.buffer.write(base64.b64decode(sys.stdin.read()))",
    "gzip": (
        "import base64,gzip,sys; "
        "sys.stdout.buffer.write(gzip.decompress(base64.b85decode(sys.stdin.read().strip())))"
    ),
    "xz": (
        "import base64,lzma,sys; "
        "sys.stdout.buffer.write(lzma.decompress(base64.b85decode(sys.stdin.read().strip())))"
    ),
}
"""How the script unpacks the agent, tried in this order until the script fits: as it
is in base64; gzip-compressed in base85 (a quarter smaller than base64); xz-compressed
(python3's lzma, in every distribution's python3 package) in base85."""


@dataclass(frozen=True, slots=True)
class Trust:
    """How the script's agent proves itself and checks the controller."""

    register: bool  # the token is its launch's: the agent registers its instance first
    ca_pem: str | None  # the run's CA certificate, pinned (an https controller)


def shipped_agent(agent_source: str) -> str:
    """The agent as user data carries it: its module docstring (the protocol spec, a
    third of the file) cut to a pointer, the code line for line the same."""
    tree = ast.parse(agent_source)
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
        and first.end_lineno is not None
    ):
        return agent_source
    lines = agent_source.splitlines(keepends=True)
    # Every other docstring and comment line blanked, line for line (a traceback's line
    # numbers still match bootstrap/agent.py): the agent fits EC2's 16 KB compressed.
    # Attribute docs (a string after an assignment) too: every string that is a
    # statement of its own.
    for doc in ast.walk(tree):
        if (
            doc is not first
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
            and doc.end_lineno is not None
        ):
            indent = lines[doc.lineno - 1][: doc.col_offset]
            lines[doc.lineno - 1] = f'{indent}""\n'
            for i in range(doc.lineno, doc.end_lineno):
                lines[i] = "\n"
    for token in tokenize.generate_tokens(io.StringIO(agent_source).readline):
        if token.type == tokenize.COMMENT:  # a comment, whole line or after code: cut
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col].rstrip() + "\n"
    pointer = '"""The autoscaler\'s worker agent; its protocol: bootstrap/agent.py."""\n'
    return "".join([*lines[: first.lineno - 1], pointer, *lines[first.end_lineno :]])


def render_user_data(
    agent_source: str,
    url: str,
    token: str,
    agent_args: Sequence[str] = (),
    poweroff_on_exit: bool = True,
    remote_dir: str = "/var/lib/autoscaler",
    python: str = "python3",
    imds_url: str = "http://169.254.169.254",
    *,
    register: bool = False,
    ca_pem: str | None = None,
) -> str | bytes:
    """The user-data script that starts the agent on an instance (see the module doc);
    bytes when it is that script gzip-compressed as a whole, the agent in it as plain
    text: cloud-init runs it uncompressed (it reads gzip's magic bytes). The last
    resort, as the script is then no longer text to read in the console.

    ``agent_source`` is the text of ``bootstrap/agent.py`` (``agent_start.agent_source``
    reads it). ``token`` is a launch's token with ``register`` (the agent registers its
    instance with it), else a machine's. ``ca_pem``: the CA certificate (PEM) the agent
    pins for an ``https`` ``url``. BootstrapError if the script would exceed EC2's 16 KB
    limit even compressed, or if the token could not be written safely.
    """
    if not token or not re.fullmatch(r"[\x21-\x7e]+", token):
        raise BootstrapError("the run token must be non-empty printable ASCII without spaces")
    if not remote_dir.startswith("/"):
        raise BootstrapError(f"remote_dir {remote_dir!r} must be an absolute path")
    if ca_pem is not None and "AUTOSCALER_CA" in ca_pem:
        raise BootstrapError("the CA certificate holds the line that ends its here-document")
    agent_bytes = shipped_agent(agent_source).encode()
    trust = Trust(register, ca_pem)
    parts = (url, token, agent_args, poweroff_on_exit, remote_dir, python, imds_url, trust)
    for encoding in _UNPACK:  # in order: as it is, then smaller and smaller
        script = _script(agent_bytes, encoding, *parts)
        if len(script.encode()) <= USER_DATA_LIMIT:
            return script
    packed = gzip.compress(_script(agent_bytes, "plain", *parts).encode(), 9, mtime=0)
    if len(packed) <= USER_DATA_LIMIT:
        return packed
    raise BootstrapError(
        f"user data is {len(packed)} bytes even with the agent ({len(agent_bytes)} bytes) "
        f"xz-compressed, or the whole script gzip-compressed; EC2 allows {USER_DATA_LIMIT}: "
        "use the SSH bootstrap"
    )


def _script(
    agent: bytes,
    encoding: str,
    url: str,
    token: str,
    agent_args: Sequence[str],
    poweroff_on_exit: bool,
    remote_dir: str,
    python: str,
    imds_url: str,
    trust: Trust,
) -> str:
    q = shlex.quote
    if encoding == "gzip":
        blob = base64.b85encode(gzip.compress(agent, compresslevel=9, mtime=0)).decode() + "\n"
    elif encoding == "xz":
        blob = base64.b85encode(lzma.compress(agent, preset=9 | lzma.PRESET_EXTREME)).decode()
        blob += "\n"
    elif encoding == "plain":
        blob = agent.decode()
        blob += "" if blob.endswith("\n") else "\n"
        if "\nAUTOSCALER_AGENT\n" in "\n" + blob:
            raise BootstrapError("the agent holds the line that ends its here-document")
    else:
        blob = base64.encodebytes(agent).decode()
    command = _agent_command_line(python, remote_dir, url, agent_args, trust)
    ca = (
        f"cat > \"$DIR/ca.pem\" <<'AUTOSCALER_CA'\n{trust.ca_pem.strip()}\nAUTOSCALER_CA\n"
        if trust.ca_pem
        else ""
    )
    write = "cat" if encoding == "plain" else f'"$PY" -c {q(_UNPACK[encoding])}'
    poweroff = (
        'echo "autoscaler: agent exited with status $rc; powering off"\n'
        'if [ "$(id -u)" -eq 0 ]; then poweroff; else sudo -n poweroff; fi\n'
        if poweroff_on_exit
        else ""
    )
    return f"""#!/bin/sh
# autoscaler: start the worker agent (generated by bootstrap/userdata.py)
set -eu
umask 077
PY={q(python)}
DIR={q(remote_dir)}
mkdir -p "$DIR/work"
chmod 700 "$DIR"
MACHINE=$("$PY" - {q(imds_url)} <<'AUTOSCALER_IMDS'
{_IMDS_CLIENT}AUTOSCALER_IMDS
)
printf '%s\\n' {q(token)} > "$DIR/token"
{ca}{write} > "$DIR/agent.py" <<'AUTOSCALER_AGENT'
{blob}AUTOSCALER_AGENT
echo "autoscaler: starting the agent as $MACHINE"
rc=0
{command} \\
    < /dev/null >> "$DIR/agent.log" 2>&1 || rc=$?
{poweroff}exit "$rc"
"""


def _agent_command_line(
    python: str, remote_dir: str, url: str, agent_args: Sequence[str], trust: Trust
) -> str:
    """The agent's command, quoted for sh; its machine id is the script's ``$MACHINE``."""
    if trust.ca_pem:
        agent_args = [*agent_args, "--ca-file", f"{remote_dir}/ca.pem"]
    argv = agent_command(
        python,
        f"{remote_dir}/agent.py",
        url=url,
        machine="MACHINE",
        flags=agent_args,
        token_file=f"{remote_dir}/token",
        workdir=f"{remote_dir}/work",
    ).argv
    if trust.register:
        argv = tuple("--launch-token-file" if a == "--token-file" else a for a in argv)
    words = [shlex.quote(arg) for arg in argv]
    words[argv.index("--machine", 2) + 1] = '"$MACHINE"'
    return " ".join(words)
