"""Keeping passwords out of everything lockwatch writes."""

from __future__ import annotations

import re

# Up to the last "@" before the path: an unencoded "@" in the password is
# still the password's (libpq would misread it, see misread_authority).
_URI_PASSWORD = re.compile(
    r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^\s/?#]*)(?=@)", re.I
)
_URI_AUTHORITY = re.compile(r"^\s*postgres(?:ql)?://(?P<authority>[^/?#]*)", re.I)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|\S+)", re.I
)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)(?P<secret>[^&\s]+)", re.I)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Blank out what is a password by its place in a connection string (a URI's
    user info, ``password=``), and every known secret (whole values: a DSN, a
    token; never a password's text on its own, which may be "1" or "main").

    >>> redact("postgresql://app:hunter2@db:5432/x")
    'postgresql://app:***@db:5432/x'
    >>> redact("postgresql://app:Wr@ngPW@db/x")
    'postgresql://app:***@db/x'
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
    import psycopg.conninfo  # here: settings/fields.py check_dsn says why

    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """What of a DSN is searched for in messages: the DSN itself, whole. Its
    password is kept out by structure (``describe_dsn`` never shows it, ``redact``
    blanks it where a connection string shows it); searching for its text would
    garble every message a short password happens to be part of.
    """
    return (dsn,) if dsn else ()


def misread_authority(dsn: str) -> bool:
    """A URI DSN whose user info has an unencoded "@": libpq splits at the first
    one, reads the password's tail as the host name and sends it to DNS.

    >>> misread_authority("postgresql://u:Wr@ngPW@db/x")
    True
    >>> misread_authority("postgresql://u:Wr%40ngPW@db/x"), misread_authority("host=db")
    (False, False)
    """
    match = _URI_AUTHORITY.match(dsn)
    return match is not None and match.group("authority").count("@") > 1


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
    import psycopg.conninfo  # here: settings/fields.py check_dsn says why

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    if misread_authority(dsn):
        return "<DSN with an unencoded @ in its password>"
    user = str(parts.get("user") or "")
    host = parts.get("host") or "localhost"
    port = parts.get("port")
    dbname = str(parts.get("dbname") or "")
    where = f"{host}:{port}" if port else str(host)
    return f"{user + '@' if user else ''}{where}/{dbname}"
