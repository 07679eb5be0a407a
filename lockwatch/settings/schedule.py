"""Cron schedules in a time zone: which slot a start belongs to, and which
slots are due. cronsim does the calendar (DST included); this adds slots."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import model_validator

from lockwatch.settings.fields import PositiveSeconds, Section, Text, problem_at

# A schedule whose slots are further apart than this is not looked back over
# slot by slot (a yearly job still works: it simply has one slot in range).
_MAX_SLOTS = 10_000


def check_cron(expression: str, timezone: str) -> str | None:
    """What is wrong with a schedule, or None.

    >>> check_cron("0 3 * * *", "Europe/Berlin") is None
    True
    >>> check_cron("0 25 * * *", "UTC")
    'bad cron expression: Bad hour'
    >>> check_cron("0 3 * * *", "Mars/Olympus")
    "unknown time zone: 'Mars/Olympus'"
    """
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone: {timezone!r}"
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=zone))
    except CronSimError as exc:
        return f"bad cron expression: {exc}"
    return None


@dataclass(frozen=True, slots=True)
class Schedule(Section):
    cron: Text
    timezone: Text = "UTC"
    grace: PositiveSeconds = 300.0  # seconds a start may come after its slot

    @model_validator(mode="after")
    def _valid_in_its_zone(self) -> Self:
        problem = check_cron(self.cron, self.timezone)
        if problem is not None:
            key = "timezone" if problem.startswith("unknown time zone") else "cron"
            raise problem_at((key,), problem, getattr(self, key))
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def slot_of(self, moment: datetime) -> datetime:
        """The latest scheduled time at or before ``moment``: the slot a start
        at ``moment`` belongs to.

        >>> from datetime import UTC
        >>> Schedule("0 3 * * *").slot_of(datetime(2026, 11, 29, 3, 0, 40, tzinfo=UTC))
        datetime.datetime(2026, 11, 29, 3, 0, tzinfo=zoneinfo.ZoneInfo(key='UTC'))
        """
        local = moment.astimezone(self.zone).replace(microsecond=0)
        # cronsim going backwards starts strictly before its start time, and
        # slots fall on whole seconds: a second past the moment's own second
        # includes a slot at that very second and nothing after the moment.
        slot = next(CronSim(self.cron, local + timedelta(seconds=1), reverse=True))
        # In the hour a DST change repeats, cronsim gives the first of the two
        # times a wall clock shows; a moment in the second one belongs to the
        # second slot of that reading.
        # (Times in one zone compare by their wall clocks, fold ignored: in UTC.)
        repeated = slot.replace(fold=1)
        first, second = slot.astimezone(UTC), repeated.astimezone(UTC)
        return repeated if first < second <= moment else slot

    def slots_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """Scheduled times t with start <= t <= end, oldest first."""
        count = 0
        for slot in CronSim(self.cron, start.astimezone(self.zone) - timedelta(seconds=1)):
            if slot > end or count >= _MAX_SLOTS:
                return
            if slot >= start:
                count += 1
                yield slot

    def due_slots(self, not_before: datetime, now: datetime) -> list[datetime]:
        """Slots from ``not_before`` whose grace has run out by ``now``."""
        return list(self.slots_between(not_before, now - timedelta(seconds=self.grace)))

    def run_key(self, started_at: datetime) -> str:
        """The run key of a start that brought none: its slot, as ISO 8601.

        >>> from datetime import UTC
        >>> Schedule("*/15 * * * *", "Europe/Berlin").run_key(datetime(2026, 3, 29, 1, 7, tzinfo=UTC))
        '2026-03-29T03:00:00+02:00'
        """
        return self.slot_of(started_at).isoformat()
