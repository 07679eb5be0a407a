"""Every log event is one line, whatever a name in its message holds."""

from __future__ import annotations

import json
import logging

import pytest

from lockwatch.logs import FORMATS, formatter

HOSTILE = "app\nFAKE 2026-01-01T00:00:00.000Z ERROR x\r\u2028y\u2029z\x85w\x1b[2J\x0b\x0c\x1c\x7f\x9b\udcff"


def record(message: str, *args: object) -> logging.LogRecord:
    event = logging.LogRecord("lockwatch.daemon", logging.WARNING, "", 0, message, args, None)
    event.created = 0.0
    return event


@pytest.mark.parametrize("log_format", FORMATS)
def test_a_name_with_line_breaks_and_escapes_stays_on_one_line(log_format: str) -> None:
    line = formatter(log_format).format(record("firing %s: held", HOSTILE))

    assert len(line.splitlines()) == 1, line
    assert "\x1b" not in line
    assert line.isprintable(), line


def test_json_and_logfmt_keep_the_name_faithfully() -> None:
    event = json.loads(formatter("json").format(record("db %s", HOSTILE)))
    value = formatter("logfmt").format(record("%s", HOSTILE)).split(" msg=", 1)[1]

    assert event["msg"] == f"db {HOSTILE}"  # a lone surrogate comes back as itself
    assert json.loads(value) == HOSTILE


def test_text_spells_out_what_it_escapes() -> None:
    line = formatter("text").format(record("db %s", "a\nb\u2028c"))

    assert line.endswith("lockwatch.daemon: db a\\nb\\u2028c")
