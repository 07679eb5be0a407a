"""Text for people: durations, one-line values from database clients, UTC times."""

from __future__ import annotations

import functools
import unicodedata
from datetime import UTC, datetime, timedelta

QUERY_LIMIT = 200


SUMMARY_VALUE_LIMIT = 60


ELLIPSIS = "…"


def format_duration(seconds: float) -> str:
    """A duration the way a person reads it, to two units at most.

    >>> format_duration(42.7)
    '42s'
    >>> format_duration(340)
    '5m40s'
    >>> format_duration(300)
    '5m'
    >>> format_duration(3 * 3600 + 2 * 60 + 9)
    '3h2m'
    >>> format_duration(2 * 86400 + 3600)
    '2d1h'
    >>> format_duration(-5)
    '0s'
    """
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    for big, big_unit, small, small_unit in (
        (days, "d", hours, "h"),
        (hours, "h", minutes, "m"),
        (minutes, "m", secs, "s"),
    ):
        if big:
            return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"
    return f"{secs}s"


def format_short_duration(seconds: float) -> str:
    """``format_duration`` that keeps what is below a second: a hold's normal.

    >>> format_short_duration(0.04), format_short_duration(0.0), format_short_duration(2.5)
    ('40ms', '0ms', '2.5s')
    >>> format_short_duration(300)
    '5m'
    """
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 10:
        return f"{seconds:.1f}s".replace(".0s", "s")
    return format_duration(seconds)


def _breaks_line(ch: str) -> bool:
    """Control, format and private characters, and the Unicode line and
    paragraph separators: anything a terminal or chat client may render as a
    break or not at all."""
    category = unicodedata.category(ch)
    return category[0] == "C" or category in ("Zl", "Zp")


def one_line(text: object, limit: int = SUMMARY_VALUE_LIMIT) -> str:
    """A value from a database client made safe to put inside a one-line summary:
    control characters and line breaks become spaces, runs of blanks collapse,
    and the result is capped at ``limit`` characters.

    >>> one_line("SELECT\\n  pg_advisory_lock(42);\\x00")
    'SELECT pg_advisory_lock(42);'
    >>> one_line("x" * 70, 10)
    'xxxxxxxxxx…'
    """
    cleaned = str(text)
    if not cleaned.isprintable():  # else nothing in it breaks a line: no step per character
        cleaned = "".join(" " if _breaks_line(ch) else ch for ch in cleaned)
    collapsed = " ".join(cleaned.split())
    return collapsed if len(collapsed) <= limit else collapsed[:limit] + ELLIPSIS


def escaped_breaks(text: str) -> str:
    """``text`` with every character that may break a line (or hide) spelt out
    as a Python escape, so that a value from a database client never splits
    one log line into two.

    >>> escaped_breaks("app\\nFAKE ERROR\\u2028x\\x1b[2J")
    'app\\\\nFAKE ERROR\\\\u2028x\\\\x1b[2J'
    """
    if text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape").decode("ascii") if _breaks_line(ch) else ch for ch in text
    )


def truncate(text: str, limit: int = QUERY_LIMIT) -> str:
    """
    >>> truncate("abcdef", 3)
    'abc…'
    """
    return text if len(text) <= limit else text[:limit] + ELLIPSIS


def printable(text: str) -> str:
    """``text`` made encodable as UTF-8.

    Names and strings from database clients may carry lone surrogates (how Python
    keeps undecodable bytes); they would break every UTF-8 encoder downstream, so
    they are spelt out instead.

    >>> printable("app\\udcff")
    'app\\\\udcff'
    >>> printable("plain")
    'plain'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def client_address(addr: str | None, port: int | None, hostname: str | None = None) -> str:
    """Where a client connects from, as ``ss`` names the connection: its
    address and TCP port (the port tells one process among several on a host),
    and the host name where the server resolves it (``log_hostname``).

    >>> client_address("10.0.0.5", 51234), client_address("::1", 40000, "worker-3")
    ('10.0.0.5:51234', '[::1]:40000 (worker-3)')
    >>> client_address(None, None), client_address("10.0.0.5", None)
    ('local socket', '10.0.0.5')
    """
    if addr is None:
        return "local socket"
    shown = f"[{addr}]" if ":" in addr and port is not None else addr
    shown = shown if port is None else f"{shown}:{port}"
    return shown if not hostname else f"{shown} ({hostname})"


# Moments told poll after poll (a session's start names its findings, its
# incident and its guarded SQL): their texts are made once, not each poll.
MOMENT_TEXTS_KEPT = 4096


@functools.lru_cache(maxsize=MOMENT_TEXTS_KEPT)
def iso_utc(moment: datetime | None) -> str | None:
    """The moment in UTC to the second (equal moments, whatever their
    offsets, have one text: it is kept by the moment).

    >>> iso_utc(datetime(2026, 11, 29, 9, 14, 59, 123456, tzinfo=UTC))
    '2026-11-29T09:14:59Z'
    """
    if moment is None:
        return None
    if moment.tzinfo is None:
        # Samplers hand out aware datetimes; a naive one can only be meant as UTC.
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cause_first(error: str, limit: int) -> tuple[str, str]:
    """A driver's error as (cause, where): the cause is its last clause, what
    a person reads first; the rest says where it happened. ``limit`` bounds the
    line it is read from.

    >>> cause_first('db:5432/app: connection to server at "db", port 5432 failed: Connection refused', 3000)
    ('Connection refused', 'db:5432/app: connection to server at "db", port 5432 failed')
    >>> cause_first("no snapshot", 3000)
    ('no snapshot', '')
    """
    line = one_line(error, limit)
    where, colon, cause = line.rpartition(": ")
    if not colon or not cause.strip():
        return line, ""
    return cause.strip(), where.strip()


def iso_text(moment: datetime) -> str:
    """``moment.isoformat()``, kept for a moment told poll after poll. Equal
    moments at other offsets have other texts: kept by moment and offset.

    >>> from datetime import timezone
    >>> at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    >>> iso_text(at), iso_text(at.astimezone(timezone(timedelta(hours=1))))
    ('2026-12-02T12:00:00+00:00', '2026-12-02T13:00:00+01:00')
    """
    return _iso_text(moment, moment.utcoffset())


@functools.lru_cache(maxsize=MOMENT_TEXTS_KEPT)
def _iso_text(moment: datetime, offset: timedelta | None) -> str:
    return moment.isoformat()
