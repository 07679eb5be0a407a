"""Whether a serverless target's server has clients other than lockwatch: its
own session is the only one, and lockwatch may close it and let it sleep."""

from __future__ import annotations

from importlib import resources

from lockwatch.sample.session import TargetSession

QUERY = (resources.files("lockwatch.sample") / "sql" / "other_clients.sql").read_text(
    encoding="utf-8"
)


def other_clients(session: TargetSession) -> int:
    """Client sessions on the server besides lockwatch's. Raises SampleError."""
    rows = session.query(QUERY)
    return int(rows[0]["others"]) if rows else 0
