"""A query's fingerprint: what statement it is, never what values it ran with.

The server's ``query_id`` where it computes one (``compute_query_id``, or
pg_stat_statements loaded), else the query's text with every constant and
comment taken out: a string, number, bit string or dollar-quoted body
becomes ``?``, comments go, runs of white space become one space. Bind
parameters (``$1``) carry no value in the text and stay. A statement cut
short by ``track_activity_query_size`` (a string left open) loses the rest.
Bounded to :data:`FINGERPRINT_CHARS`, so a fingerprint is fit for a label
and for the history, whatever a client sent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lockwatch.model.findings import Finding
from lockwatch.model.locks import HIDDEN

FINGERPRINT_CHARS = 160

# Each alternative is matched from the left, so a quote inside a comment or
# a "--" inside a string is taken as part of what it sits in. Every constant
# form PostgreSQL's lexer knows: standard strings (with '' inside), E'' with
# backslash escapes, B''/X'' bit strings, U&'' strings, dollar-quoted bodies,
# numbers (with exponents, and 0x/0o/0b and _ separators, PostgreSQL 16+);
# quoted identifiers are kept whole (they name things, they hold no value).
_TOKENS = re.compile(
    r"""
      (?P<comment>--[^\n]*|/\*(?:[^*]|\*(?!/))*(?:\*/|$))
    | (?P<ident>"(?:[^"]|"")*"?)
    | (?P<string>(?:[eE]'(?:[^'\\]|\\.|'')*'?)|(?:(?:[bBxX]|[uU]&)?'(?:[^']|'')*'?))
    | (?P<dollar>\$(?P<tag>[A-Za-z_][A-Za-z_0-9]*)?\$(?:.|\n)*?(?:\$(?P=tag)?\$|$))
    | (?P<param>\$\d+)
    | (?P<word>[A-Za-z_][A-Za-z_0-9$]*)
    | (?P<number>(?:0[xXoObB][0-9A-Fa-f_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?))
    | (?P<space>\s+)
    """,
    re.VERBOSE | re.DOTALL,
)


def normalised_query(text: str) -> str:
    """``text`` with its constants as ``?``, no comments, single spaces.

    >>> normalised_query("SELECT * FROM jobs WHERE id = 42 AND state = 'new'")
    'SELECT * FROM jobs WHERE id = ? AND state = ?'
    >>> normalised_query("UPDATE t SET v = E'a\\\\'b' -- by alice\\nWHERE k = $1")
    'UPDATE t SET v = ? WHERE k = $1'
    >>> normalised_query("SELECT $$secret$$, $x$it's$x$, 1.5e3, -7, x1 FROM \\"t 2\\" /* c */")
    'SELECT ?, ?, ?, -?, x1 FROM "t 2"'
    >>> normalised_query("INSERT INTO t VALUES ('cut sho")
    'INSERT INTO t VALUES (?'
    """
    parts: list[str] = []
    position = 0
    for match in _TOKENS.finditer(text):
        parts.append(text[position : match.start()])  # operators and punctuation, as they are
        position = match.end()
        kind = match.lastgroup
        if kind in ("string", "dollar", "number"):
            parts.append("?")
        elif kind in ("space", "comment"):
            parts.append(" ")
        else:
            parts.append(match.group())
    parts.append(text[position:])
    return " ".join("".join(parts).split())


def query_fingerprint(query: str, query_id: int | None) -> str | None:
    """The fingerprint of a session's query: ``query_id:N`` when the server
    computed one, else its normalised text, bounded; None for no query.

    >>> query_fingerprint("SELECT 1", -71234)
    'query_id:-71234'
    >>> query_fingerprint("SELECT pg_sleep(600)", None)
    'SELECT pg_sleep(?)'
    >>> query_fingerprint("", None) is None
    True
    """
    if query_id is not None and query_id != 0:
        return f"query_id:{query_id}"
    normalised = normalised_query(query)
    if not normalised:
        return None
    if len(normalised) <= FINGERPRINT_CHARS:
        return normalised
    return normalised[: FINGERPRINT_CHARS - 1] + "…"


def holder_fingerprint(findings: Sequence[Finding]) -> str:
    """The fingerprint of the query of the first holder the findings name
    (its text as a finding shows it: no query_id there); "" for none."""
    holders = (holder for f in findings for holder in f.evidence.named_holders)
    query = next((h.query for h in holders if h.query and h.query != HIDDEN), None)
    return (query_fingerprint(query, None) or "") if query else ""
