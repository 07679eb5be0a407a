"""The status page's small pieces: escaped values, moments, tables, evidence."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from lockwatch.text import format_duration


def escape(value: object) -> str:
    """Any value as HTML text, escaped (quotes too, so it is safe in attributes)."""
    return html.escape("—" if value is None else str(value), quote=True)


def seconds_text(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return escape(format_duration(value))
    return escape(value)


def moment_text(now: datetime, iso: str | None) -> str | None:
    """
    >>> moment_text(datetime.fromisoformat("2026-11-29T03:05:00+00:00"), "2026-11-29T03:00:00Z")
    '2026-11-29 03:00:00 UTC (5m ago)'
    """
    if iso is None:
        return None
    since = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    ago = format_duration((now - since).total_seconds())
    return f"{iso.replace('T', ' ').replace('Z', ' UTC')} ({ago} ago)"


def moment(now: datetime, iso: str | None) -> str:
    text = moment_text(now, iso)
    if iso is None or text is None:
        return escape(None)
    return f'<time datetime="{escape(iso)}">{escape(text)}</time>'


TABLE_ROWS = 50  # sessions per table (a convoy of thousands); the API has them all

_LABELS = {
    "pid": "pid",
    "application_name": "application",
    "client_addr": "address",
    "client_port": "port",
    "client_hostname": "client host",
    "usename": "user",
    "state": "state",
    "state_seconds": "for",
    "held_seconds": "held",
    "wait_seconds": "waited",
    "xact_seconds": "in transaction",
    "mode": "mode",
    "blocked_by": "blocked by",
    "query": "last query",
}


# Columns that say nothing a person needs next to the others.
_HIDDEN = {"wait_event_type", "wait_event", "cycle"}


def _label(key: str) -> str:
    """A column or fact name for people: durations say their unit in the value.

    >>> _label("longest_wait_seconds"), _label("application_name")
    ('longest wait', 'application')
    """
    return _LABELS.get(key) or key.removesuffix("_seconds").replace("_", " ")


def _plain(value: object) -> str:
    """A nested value as one line of text, leaving out what is empty.

    >>> _plain({"sessions": {"active": 1, "idle": 0}, "lock": None, "share": 0.33333})
    'sessions active 1, share 0.33'
    """
    if isinstance(value, Mapping):
        return ", ".join(
            f"{k} {_plain(v)}" for k, v in value.items() if v not in (None, "", 0, [], {})
        )
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{round(value, 2):g}"
    return str(value)


def _cell(key: str, value: object) -> str:
    if key.endswith("_seconds"):
        return seconds_text(value)
    if key == "query" and value is not None:
        return f"<code>{escape(value)}</code>"
    if key == "subject" and isinstance(value, Mapping):
        return escape("/".join(str(v) for v in value.values() if v))
    return escape(None if value is None else _plain(value))


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A table of dicts: known columns first, in reading order; empty columns
    dropped; at most TABLE_ROWS rows, the rest counted."""
    keys: list[str] = [k for k in _LABELS if any(k in row for row in rows)]
    keys += sorted({k for row in rows for k in row} - set(keys) - _HIDDEN)
    keys = [k for k in keys if any(row.get(k) not in (None, [], "") for row in rows)]
    head = "".join(f"<th>{escape(_label(k))}</th>" for k in keys)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(k, row.get(k))}</td>" for k in keys) + "</tr>"
        for row in rows[:TABLE_ROWS]
    )
    if len(rows) > TABLE_ROWS:
        body += f'<tr><td colspan="{len(keys)}">and {len(rows) - TABLE_ROWS} more</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chain(steps: Sequence[Mapping[str, Any]]) -> str:
    items = []
    for step in steps:
        who = f"pid {escape(step.get('pid'))} {escape(step.get('application_name') or '')}"
        state = step.get("state")
        doing = (
            f"{escape(state)} for {seconds_text(step.get('state_seconds'))}"
            if state
            else "state unknown"
        )
        query = step.get("query")
        code = f" <code>{escape(query)}</code>" if query else ""
        cycle = " <strong>(back to the start: a cycle)</strong>" if step.get("cycle") else ""
        items.append(f"<li>{who.strip()}, {doing}{code}{cycle}</li>")
    return '<ol class="chain">' + "".join(items) + "</ol>"


def evidence_html(evidence: Mapping[str, Any]) -> str:
    """Sessions as tables, the blocking chain as steps, everything else as a list of facts."""
    parts: list[str] = []
    facts: list[str] = []
    for key, value in evidence.items():
        if value in (None, [], {}, ""):
            continue
        title = escape(_label(key))
        if key == "chain":
            if len(value) > 1:
                parts.append(f"<h4>blocking chain</h4>{_chain(value)}")
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            parts.append(f"<h4>{title}</h4>{table(value)}")
        elif isinstance(value, Mapping):
            parts.append(f"<h4>{title}</h4>{evidence_html(value)}")
        else:
            facts.append(f"<div><dt>{title}</dt><dd>{_cell(key, value)}</dd></div>")
    if facts:
        parts.insert(0, '<dl class="facts">' + "".join(facts) + "</dl>")
    return "".join(parts)


def percent_of_a_core(cores: object) -> str:
    if isinstance(cores, int | float) and not isinstance(cores, bool):
        return escape(f"{cores * 100:.0f}% of a core")
    return escape(None)
