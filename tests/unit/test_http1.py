"""The dispatcher's HTTP/1.1 request heads (``run/http1.py``): what agents send is read,
anything it cannot frame or serve is refused with its 4xx naming the problem."""

from __future__ import annotations

import pytest

from autoscaler.run.http1 import (
    _KEYS,
    _KEYS_MAX,
    HEAD_MAX,
    HEADERS_MAX,
    HttpError,
    head_bytes,
    parse_head,
    take_head,
)

AGENT = (
    b"POST /v1/poll HTTP/1.1\r\nHost: 127.0.0.1:8750\r\nAuthorization: Bearer t\r\n"
    b"Content-Type: application/json\r\nContent-Length: 120\r\n\r\n"
)


def test_an_agent_s_poll_head_is_read() -> None:
    request = parse_head(AGENT)
    assert (request.method, request.target, request.length) == ("POST", "/v1/poll", 120)
    assert request.headers["authorization"] == "Bearer t"
    assert request.keep_alive
    assert not request.expects_continue


@pytest.mark.parametrize(
    ("version", "connection", "keep"),
    [
        (b"HTTP/1.1", None, True),
        (b"HTTP/1.1", b"close", False),
        (b"HTTP/1.1", b"Keep-Alive, Close", False),
        (b"HTTP/1.0", None, False),
        (b"HTTP/1.0", b"keep-alive", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection_header(
    version: bytes, connection: bytes | None, keep: bool
) -> None:
    header = b"Connection: %s\r\n" % connection if connection is not None else b""
    request = parse_head(b"GET /v1/input/0/0 %s\r\nHost: h\r\n%s\r\n" % (version, header))
    assert request.keep_alive is keep
    assert request.length == 0


@pytest.mark.parametrize(
    ("head", "status", "problem"),
    [
        (b"POST /v1/poll\r\n\r\n", 400, "malformed request line 'POST /v1/poll'"),
        (b"POST  /v1/poll HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        (b"post /v1/poll HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        (b"POST /v1/poll HTTX/1.1\r\n\r\n", 400, "malformed request line"),
        (b"POST /v1/poll HTTP/2.0\r\n\r\n", 505, "'HTTP/2.0' is not served"),
        (b"POST http://x/v1/poll HTTP/1.1\r\n\r\n", 400, "request target 'http://x/v1/poll'"),
        (b"POST /v1/poll HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", 400, "Content-Length: '12x'"),
        (b"POST /v1/poll HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length: '-1'"),
        (
            b"POST /v1/poll HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            400,
            "Content-Length: conflicting values",
        ),
        (
            b"POST /v1/poll HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            411,
            "Transfer-Encoding 'chunked' is not read",
        ),
        (b"POST /v1/poll HTTP/1.1\r\nHost : h\r\n\r\n", 400, "malformed header line 'Host : h'"),
        (b"POST /v1/poll HTTP/1.1\r\n folded\r\n\r\n", 400, "malformed header line"),
        (b"POST /v1/poll HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed header line 'no colon'"),
        (b"PUT /v1/put/x HTTP/1.1\r\nExpect: magic\r\n\r\n", 417, "Expect: 'magic'"),
    ],
)
def test_a_head_that_cannot_be_served_is_refused_naming_the_problem(
    head: bytes, status: int, problem: str
) -> None:
    with pytest.raises(HttpError) as caught:
        parse_head(head)
    assert caught.value.status == status
    assert problem in caught.value.message


def test_too_many_header_lines_are_refused() -> None:
    lines = b"".join(b"X-%d: y\r\n" % i for i in range(HEADERS_MAX + 1))
    with pytest.raises(HttpError) as caught:
        parse_head(b"POST /v1/poll HTTP/1.1\r\n" + lines + b"\r\n")
    assert caught.value.status == 431


def test_header_names_are_checked_once_and_their_memory_is_bounded() -> None:
    """A name read before is not checked again, but a line without a colon is still
    refused; a client sending ever new names does not grow the daemon's memory."""
    parse_head(AGENT)
    with pytest.raises(HttpError, match="malformed header line 'Host'"):
        parse_head(b"POST /v1/poll HTTP/1.1\r\nHost\r\n\r\n")
    for i in range(3 * _KEYS_MAX // HEADERS_MAX + 1):
        names = b"".join(b"X-%d-%d: y\r\n" % (i, j) for j in range(HEADERS_MAX))
        request = parse_head(b"POST /v1/poll HTTP/1.1\r\n" + names + b"\r\n")
        assert request.headers[f"x-{i}-0"] == "y"
    assert len(_KEYS) == _KEYS_MAX
    assert parse_head(AGENT).headers["content-type"] == "application/json"


def test_a_client_that_waits_to_send_its_body_is_seen() -> None:
    head = b"PUT /v1/put/a/b HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 9\r\n\r\n"
    assert parse_head(head).expects_continue


def test_an_answer_s_head_says_its_length_and_whether_the_connection_closes() -> None:
    kept = head_bytes(200, 17, False, b"application/json")
    assert kept.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Content-Length: 17\r\n" in kept
    assert b"Content-Type: application/json\r\n" in kept
    assert b"Connection" not in kept
    assert kept.endswith(b"\r\n\r\n")
    closed = head_bytes(413, 0, True, None)
    assert closed.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close\r\n" in closed
    assert b"Content-Type" not in closed


def test_a_head_that_arrives_byte_by_byte_is_framed_at_its_last_byte() -> None:
    """Each piece is searched once (``searched``), and the blank line's four bytes are
    found even when they come in four pieces."""
    buffer, searched = bytearray(), 0
    for i, byte in enumerate(AGENT):
        buffer.append(byte)
        request = take_head(buffer, searched)
        if i < len(AGENT) - 1:
            assert request is None
            searched = len(buffer)
    assert request is not None
    assert (request.target, request.length) == ("/v1/poll", 120)
    assert buffer == b""


def test_the_body_and_the_next_request_stay_in_the_buffer() -> None:
    body = b"x" * 120
    buffer = bytearray(AGENT + body + AGENT)
    first = take_head(buffer, 0)
    assert first is not None
    assert bytes(buffer[: first.length]) == body
    del buffer[: first.length]
    assert take_head(buffer, 0) == first
    assert buffer == b""


def test_a_head_without_its_end_is_refused_once_it_reaches_the_limit() -> None:
    """431 as soon as ``HEAD_MAX`` bytes are in without the blank line, not after more
    is buffered; a head of exactly ``HEAD_MAX`` bytes is read."""
    start = b"POST /v1/poll HTTP/1.1\r\nX-Big: "
    short = bytearray(start + b"y" * (HEAD_MAX - len(start) - 1))
    assert take_head(short, 0) is None
    short.append(ord("y"))
    with pytest.raises(HttpError) as caught:
        take_head(short, len(short) - 1)
    assert caught.value.status == 431
    whole = start + b"y" * (HEAD_MAX - len(start) - 4) + b"\r\n\r\n"
    assert len(whole) == HEAD_MAX
    assert take_head(bytearray(whole), 0) is not None
    with pytest.raises(HttpError):
        take_head(bytearray(start + b"y" + whole[len(start) :]), 0)
