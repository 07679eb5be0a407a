"""Keeping passwords out of everything lockwatch writes."""

from __future__ import annotations

import re

import psycopg.conninfo

_URI_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^@\s]*)(?=@)", re.I
)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|\S+)", re.I
)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<secret>[^&\s]+)", re.I)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Blank out anything that looks like a password, and every known secret.

    >>> redact("postgresql://app:hunter2@db:5432/x")
    'postgresql://app:***@db:5432/x'
    >>> redact("host=db password='a b' user=x")
    'host=db password=*** user=x'
    >>> redact("failed for token 123:ABC", ("123:ABC",))
    'failed for token ***'
    """
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    for pattern in (_URI_PASSWORD, _KEYWORD_PASSWORD, _QUERY_PASSWORD):
        text = pattern.sub(lambda m: m.group("head") + "***", text)
    return text


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries, so it can be redacted wherever it shows up."""
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """What of a DSN must never be shown: the DSN itself and its password."""
    return tuple(s for s in (dsn_password(dsn), dsn) if s)


def first_line(error: BaseException) -> str:
    """An error's message as one line, its type when it has none: drivers add
    DETAIL and HINT lines that may quote values from the database.

    >>> first_line(ValueError("connection refused\\nDETAIL: ..."))
    'connection refused'
    >>> first_line(TimeoutError())
    'TimeoutError'
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def describe_dsn(dsn: str) -> str:
    """A DSN as it may be shown: host, port, database and user, never the password.

    >>> describe_dsn("postgresql://mon:s3cret@127.0.0.1:6432/app")
    'mon@127.0.0.1:6432/app'
    """
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    user = str(parts.get("user") or "")
    host = parts.get("host") or "localhost"
    port = parts.get("port")
    dbname = str(parts.get("dbname") or "")
    where = f"{host}:{port}" if port else str(host)
    return f"{user + '@' if user else ''}{where}/{dbname}"
