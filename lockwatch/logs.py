"""Log setup: ``text`` for a terminal, ``logfmt`` and ``json`` for collectors.

Every format stamps events in UTC with the zone and writes one event per line,
whatever a database, application or job name in a message holds: line breaks
and control characters in a message are escaped (in ``logfmt`` and ``json`` a
traceback is a field, its newlines escaped too; ``text`` puts it on the lines
after its event).
Libraries' own chatter (psycopg's warnings about its connections) stays out of
the log unless the level is ``debug``.

>>> import logging
>>> record = logging.LogRecord("lockwatch.x", logging.INFO, "", 0, 'said "hi" %s', ("there",), None)
>>> record.created = 0.0
>>> LogfmtFormatter().format(record)
'ts=1970-01-01T00:00:00.000Z level=info logger=lockwatch.x msg="said \\\\"hi\\\\" there"'
>>> JsonFormatter().format(record)
'{"ts": "1970-01-01T00:00:00.000Z", "level": "info", "logger": "lockwatch.x", "msg": "said \\\\"hi\\\\" there"}'
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import TextIO

from lockwatch.text import escaped_breaks

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "logfmt", "json")
# Loggers of libraries whose warnings are theirs to debug, not an operator's.
QUIET = ("psycopg", "psycopg.pool", "urllib3")
_BARE = re.compile(r"[^\s\"=\\]+")


def utc_timestamp(created: float) -> str:
    """``created`` (seconds since the epoch) as ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, str]:
    fields = {
        "ts": utc_timestamp(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    # An event's own facts (an incident's id, next step, runbook) as fields of
    # their own, after the message that says them too: for a collector to query.
    own = getattr(record, "fields", None)
    if isinstance(own, dict):
        fields.update((str(k), str(v)) for k, v in own.items() if k not in fields)
    if record.exc_info:
        fields["error"] = formatter.formatException(record.exc_info)
    return fields


def _logfmt_value(value: str) -> str:
    if value and value.isprintable() and _BARE.fullmatch(value):
        return value
    return _json(value)


def _json(value: object) -> str:
    """JSON with every character that is not printable escaped: json.dumps
    leaves NEL, U+2028, C1 controls and lone surrogates as they are, and
    str.splitlines(), log viewers and terminals act on them."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in text)


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs, values quoted when they hold spaces, quotes or ``=``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record, self)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per event."""

    def format(self, record: logging.LogRecord) -> str:
        return _json(_fields(record, self))


class TextFormatter(logging.Formatter):
    """``2026-12-01T10:15:02.123Z INFO lockwatch.daemon: message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return utc_timestamp(record.created)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        record.message = escaped_breaks(record.message)
        return super().formatMessage(record)


def formatter(log_format: str) -> logging.Formatter:
    if log_format == "logfmt":
        return LogfmtFormatter()
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {log_format!r} (one of {', '.join(FORMATS)})")


class _OwnHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler setup_logging installs, told apart from anyone else's."""


def setup_logging(level: str, log_format: str = "text", stream: TextIO | None = None) -> None:
    """Send every log event at ``level`` or above to ``stream`` (stderr) in ``log_format``."""
    handler = _OwnHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in list(root.handlers):
        if isinstance(old, _OwnHandler):  # set up before: replaced, others kept
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.NOTSET if level == "debug" else logging.ERROR)
