"""HTTP/1.1 requests framed strictly from a connection's bytes, and the answers' heads.

Only what the agents speak (``bootstrap/agent.py``: its own ``Link`` for polls,
``http.client`` for task files): a request line, headers, a body of ``Content-Length``
bytes, keep-alive unless ``Connection: close`` (or HTTP/1.0 without ``keep-alive``). A
chunked body, a malformed line, a bad or conflicting length or an oversized head is an
``HttpError`` naming the problem: the server answers it with its 4xx and closes, since
what follows on the connection cannot be framed. A parser of our own rather than
``http.server``'s: that one reads headers through the ``email`` package, about ten
times the CPU of the few lines the requests need, paid on every poll of every agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

HEAD_MAX = 64 << 10
"""Bytes of a request's line and headers together (``http.client``'s line limit)."""
HEADERS_MAX = 100
STREAM_LIMIT = 1 << 20
"""Bytes of an uploaded body a connection buffers before it stops reading the socket: a
file's block at a time. At asyncio streams' default of 64 KiB an upload paused and
resumed the socket's reading sixteen times a block."""
_METHOD_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""A method's and a header name's characters: a name is one if deleting them leaves
nothing (``bytes.translate``, in C: a set of a name's bytes per header cost a poll more)."""
_KEYS: dict[bytes, str] = {}
"""Header names seen, as the dict's keys (lower case): each is checked and decoded once."""
_KEYS_MAX = 256
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
"""The interim answer to a client that waits for it (``Expect: 100-continue``) before it
sends its body."""
_END = b"\r\n\r\n"


class HttpError(Exception):
    """A request that cannot be served or framed: answered with ``status``, then closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Request:
    """One request's head; its body (``length`` bytes) follows it on the connection."""

    method: str
    target: str  # as sent: path and query
    headers: dict[str, str]  # names in lower case; a repeated header keeps its last value
    length: int  # Content-Length; 0 without one
    keep_alive: bool
    expects_continue: bool  # ``Expect: 100-continue``: the client waits to send its body


def parse_head(head: bytes) -> Request:
    """The request whose line and headers are ``head`` (ending in the blank line's CRLF);
    ``HttpError`` naming what is wrong."""
    lines = head.split(b"\r\n")
    if lines[-2:] == [b"", b""]:
        del lines[-2:]
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[0] or parts[0].translate(None, _METHOD_CHARS):
        raise HttpError(400, f"malformed request line {_show(lines[0])}")
    method, target, version = parts
    if not version.startswith(b"HTTP/") or len(version) != 8 or version[6:7] != b".":
        raise HttpError(400, f"malformed request line {_show(lines[0])}")
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(505, f"{_show(version)} is not served: HTTP/1.1 only")
    if not target.startswith(b"/"):
        raise HttpError(400, f"request target {_show(target)} is not a path")
    if len(lines) - 1 > HEADERS_MAX:
        raise HttpError(431, f"more than {HEADERS_MAX} header lines")
    headers: dict[str, str] = {}
    lengths: set[bytes] = set()
    keys = _KEYS
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        key = keys.get(name) if colon else None
        if key is None:
            if not colon or not name or name.translate(None, _TOKEN_CHARS):
                raise HttpError(400, f"malformed header line {_show(line)}")
            key = name.decode("ascii").lower()
            if len(keys) < _KEYS_MAX:
                keys[name] = key
        value = value.strip(b" \t")
        if key == "content-length":
            lengths.add(value)
        headers[key] = value.decode("latin-1")
    if "transfer-encoding" in headers:
        coding = headers["transfer-encoding"]
        raise HttpError(411, f"Transfer-Encoding {coding[:40]!r} is not read: send Content-Length")
    length = 0
    if lengths:
        if len(lengths) > 1:
            raise HttpError(400, "Content-Length: conflicting values")
        value = lengths.pop()
        if not value.isdigit() or len(value) > 18:
            raise HttpError(400, f"Content-Length: {_show(value)} is not a byte count")
        length = int(value)
    connection = headers.get("connection")
    if connection is None:
        keep_alive = version == b"HTTP/1.1"
    else:
        tokens = {t.strip() for t in connection.lower().split(",")}
        keep_alive = "close" not in tokens and (version == b"HTTP/1.1" or "keep-alive" in tokens)
    expect = headers.get("expect", "").lower()
    if expect not in ("", "100-continue"):
        raise HttpError(417, f"Expect: {expect[:40]!r} is not met")
    return Request(
        method.decode("ascii"),
        target.decode("latin-1"),
        headers,
        length,
        keep_alive,
        expect == "100-continue",
    )


def take_head(buffer: bytearray, searched: int) -> Request | None:
    """The request whose head ``buffer`` starts with, cut from it; None while the head's
    end has not arrived. ``searched``: bytes at the start already searched for the end
    (the head arrives in pieces; each piece is searched once). A head past ``HEAD_MAX``
    is ``HttpError`` 431 as soon as that many bytes are there without its end."""
    end = buffer.find(_END, max(0, searched - 3)) + len(_END)
    if end < len(_END) and len(buffer) < HEAD_MAX:
        return None
    if not len(_END) <= end <= HEAD_MAX:
        raise HttpError(431, f"request line and headers exceed {HEAD_MAX} bytes")
    head = bytes(buffer[:end])
    del buffer[:end]
    return parse_head(head)


_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}


def head_bytes(status: int, length: int, close: bool, content_type: bytes | None) -> bytes:
    """A response's status line and headers for a body of ``length`` bytes."""
    kind = b"Content-Type: %s\r\n" % content_type if content_type is not None else b""
    shut = b"Connection: close\r\n" if close else b""
    return b"%sServer: autoscaler\r\n%sContent-Length: %d\r\n%s\r\n" % (
        _STATUS_LINES[status],
        kind,
        length,
        shut,
    )


def _show(text: bytes) -> str:
    """A piece of a request, quoted and cut short for a message."""
    return repr(text[:80].decode("latin-1"))
