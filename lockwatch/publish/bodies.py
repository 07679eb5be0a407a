"""A request's body however the client frames it (``Content-Length`` or
``Transfer-Encoding: chunked``), or a refusal saying why; never a body
silently taken as empty."""

from __future__ import annotations

from email.message import Message
from http import HTTPStatus
from typing import Protocol

LINE_MAX = 1024  # bytes of a chunk-size or trailer line
TRAILERS_MAX = 32


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...
    def readline(self, size: int, /) -> bytes: ...


class BodyRefusedError(Exception):
    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def read_body(headers: Message, rfile: Readable, limit: int) -> bytes:
    """The body, at most ``limit`` bytes; an announced length over it is refused
    before a byte of the body is read."""
    codings = [
        coding.strip().lower()
        for value in headers.get_all("Transfer-Encoding") or ()
        for coding in value.split(",")
        if coding.strip()
    ]
    lengths = {value.strip() for value in headers.get_all("Content-Length") or ()}
    if codings:
        if lengths:
            raise BodyRefusedError(
                HTTPStatus.BAD_REQUEST, "both Content-Length and Transfer-Encoding: send one"
            )
        if codings != ["chunked"]:
            raise BodyRefusedError(
                HTTPStatus.NOT_IMPLEMENTED,
                "only the chunked transfer coding is read: send the body as it is",
            )
        return _read_chunked(rfile, limit)
    if len(lengths) > 1:
        raise BodyRefusedError(HTTPStatus.BAD_REQUEST, "Content-Length given more than once")
    text = lengths.pop() if lengths else "0"
    if not (text.isascii() and text.isdigit()):
        raise BodyRefusedError(HTTPStatus.BAD_REQUEST, f"body must be 0 to {limit} bytes")
    length = int(text)
    if length > limit:
        raise BodyRefusedError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body must be 0 to {limit} bytes"
        )
    body = rfile.read(length)
    if len(body) < length:
        raise BodyRefusedError(HTTPStatus.BAD_REQUEST, "body shorter than its Content-Length")
    return body


def _line(rfile: Readable, what: str) -> bytes:
    line = rfile.readline(LINE_MAX + 1)
    if len(line) > LINE_MAX or not line.endswith(b"\n"):
        raise BodyRefusedError(HTTPStatus.BAD_REQUEST, f"chunked body: {what} missing or too long")
    return line.rstrip(b"\r\n")


def _read_chunked(rfile: Readable, limit: int) -> bytes:
    body = bytearray()
    while True:
        size_text = _line(rfile, "chunk size").split(b";", 1)[0].strip()
        if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
            raise BodyRefusedError(HTTPStatus.BAD_REQUEST, "chunked body: bad chunk size")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(TRAILERS_MAX):
                if not _line(rfile, "trailer"):
                    return bytes(body)
            raise BodyRefusedError(HTTPStatus.BAD_REQUEST, "chunked body: too many trailers")
        if len(body) + size > limit:
            raise BodyRefusedError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body must be 0 to {limit} bytes"
            )
        chunk = rfile.read(size)
        if len(chunk) < size or rfile.read(2) != b"\r\n":
            raise BodyRefusedError(HTTPStatus.BAD_REQUEST, "chunked body: a chunk is cut short")
        body += chunk
