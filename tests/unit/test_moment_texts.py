"""The texts of moments kept from poll to poll are the texts made anew: at
any offset, with or without microseconds, and for equal moments at other
offsets (equal datetimes, other ISO texts)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.incidents import IncidentRoot, RootKind
from lockwatch.text import iso_text, iso_utc

OFFSETS = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
MOMENTS = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(MOMENTS, st.lists(OFFSETS, min_size=1, max_size=4), st.booleans())
def test_a_kept_text_is_the_text_made_anew(
    moment: datetime, offsets: list[timezone], whole_seconds: bool
) -> None:
    if whole_seconds:
        moment = moment.replace(microsecond=0)
    for seen in [moment.astimezone(offset) for offset in offsets] * 2:  # each twice: kept
        assert iso_text(seen) == seen.isoformat()
        assert iso_utc(seen) == seen.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert iso_utc(seen.replace(tzinfo=None)) == seen.strftime("%Y-%m-%dT%H:%M:%SZ")


@given(MOMENTS, OFFSETS, OFFSETS)
def test_a_kept_fingerprint_is_the_fingerprint_of_the_root(
    moment: datetime, one: timezone, other: timezone
) -> None:
    first = IncidentRoot(RootKind.SESSION, "main", pid=7, backend_start=moment.astimezone(one))
    second = IncidentRoot(RootKind.SESSION, "main", pid=7, backend_start=moment.astimezone(other))
    for root in (first, second, first):
        made = hashlib.sha256("\x1f".join(root.identity).encode()).hexdigest()[:16]
        assert root.fingerprint == made
        assert root.identity[3] == root.backend_start.isoformat()  # type: ignore[union-attr]
