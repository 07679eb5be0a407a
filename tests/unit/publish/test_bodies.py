"""Request bodies however framed: Content-Length, chunked, or refused."""

from __future__ import annotations

import io
from email.message import Message
from http import HTTPStatus

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.publish.bodies import BodyRefusedError, read_body


def headers(**fields: str) -> Message:
    message = Message()
    for name, value in fields.items():
        message[name.replace("_", "-")] = value
    return message


def chunked(body: bytes, size: int) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@given(st.binary(max_size=300), st.integers(1, 64))
def test_a_chunked_body_reads_back_whole(body: bytes, size: int) -> None:
    framed = io.BytesIO(chunked(body, size) + b"next request")
    assert read_body(headers(Transfer_Encoding="chunked"), framed, 1000) == body
    assert framed.read() == b"next request"


@pytest.mark.parametrize(
    ("fields", "raw", "status"),
    [
        ({"Transfer_Encoding": "chunked"}, b"zz\r\n{}\r\n0\r\n\r\n", HTTPStatus.BAD_REQUEST),
        ({"Transfer_Encoding": "chunked"}, b"5\r\n{}", HTTPStatus.BAD_REQUEST),
        ({"Transfer_Encoding": "chunked"}, b"400\r\n", HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
        ({"Transfer_Encoding": "gzip, chunked"}, b"0\r\n\r\n", HTTPStatus.NOT_IMPLEMENTED),
        ({"Transfer_Encoding": "chunked", "Content_Length": "2"}, b"{}", HTTPStatus.BAD_REQUEST),
        ({"Content_Length": "-1"}, b"", HTTPStatus.BAD_REQUEST),
        ({"Content_Length": "10"}, b"{}", HTTPStatus.BAD_REQUEST),
        ({"Content_Length": "2000"}, b"{}", HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
    ],
)
def test_a_body_that_cannot_be_read_is_refused_with_its_status(
    fields: dict[str, str], raw: bytes, status: HTTPStatus
) -> None:
    with pytest.raises(BodyRefusedError) as refused:
        read_body(headers(**fields), io.BytesIO(raw), 1000)
    assert refused.value.status is status


def test_a_body_with_its_length_or_none_at_all_reads_as_sent() -> None:
    assert read_body(headers(Content_Length="2"), io.BytesIO(b"{}rest"), 1000) == b"{}"
    assert read_body(headers(), io.BytesIO(b"rest"), 1000) == b""
