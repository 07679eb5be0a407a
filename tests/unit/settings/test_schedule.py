"""Schedules: slots, grace, time zones and DST, with the clock pinned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.settings.schedule import Schedule, check_cron

BERLIN = ZoneInfo("Europe/Berlin")


def test_a_start_a_little_after_its_slot_belongs_to_that_slot() -> None:
    nightly = Schedule("0 3 * * *", "Europe/Berlin")
    start = datetime(2026, 11, 29, 3, 0, 12, tzinfo=BERLIN)
    assert nightly.slot_of(start) == datetime(2026, 11, 29, 3, 0, tzinfo=BERLIN)


def test_a_start_exactly_on_its_slot_belongs_to_it_not_to_the_one_before() -> None:
    hourly = Schedule("0 * * * *")
    on_time = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert hourly.slot_of(on_time) == on_time


def test_it_handles_dst_mar_when_the_slot_hour_does_not_exist() -> None:
    # 02:30 does not exist in Berlin on 2026-03-29; cron runs it at 03:00.
    nightly = Schedule("30 2 * * *", "Europe/Berlin")
    slots = list(
        nightly.slots_between(
            datetime(2026, 3, 28, 12, tzinfo=BERLIN), datetime(2026, 3, 30, 12, tzinfo=BERLIN)
        )
    )
    # 03:00 CEST is 01:00 UTC on the day of the change; 02:30 CEST is 00:30 UTC after it.
    assert [slot.astimezone(UTC).strftime("%d %H:%M") for slot in slots] == ["29 01:00", "30 00:30"]


def test_it_handles_dst_oct_when_the_slot_hour_happens_twice() -> None:
    nightly = Schedule("30 2 * * *", "Europe/Berlin")
    slots = list(
        nightly.slots_between(
            datetime(2026, 10, 24, 12, tzinfo=BERLIN), datetime(2026, 10, 26, 12, tzinfo=BERLIN)
        )
    )
    assert len(slots) == 2, "the repeated hour runs the job once"


def test_a_slot_is_due_only_after_its_grace() -> None:
    nightly = Schedule("0 3 * * *", grace=600)
    slot = datetime(2026, 11, 29, 3, 0, tzinfo=UTC)
    assert nightly.due_slots(slot - timedelta(hours=1), slot + timedelta(seconds=599)) == []
    assert nightly.due_slots(slot - timedelta(hours=1), slot + timedelta(seconds=600)) == [slot]


def test_the_run_key_of_a_start_without_one_is_its_slot_in_the_schedule_zone() -> None:
    nightly = Schedule("0 3 * * *", "Europe/Berlin")
    assert (
        nightly.run_key(datetime(2026, 11, 29, 2, 0, 5, tzinfo=UTC)) == "2026-11-29T03:00:00+01:00"
    )


def test_bad_schedules_say_what_is_wrong() -> None:
    assert check_cron("0 3 * * *", "UTC") is None
    assert check_cron("61 * * * *", "UTC") == "bad cron expression: Bad minute"
    assert check_cron("0 3 * *", "UTC") is not None
    assert check_cron("0 3 * * *", "Nowhere/Land") == "unknown time zone: 'Nowhere/Land'"


@given(
    st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1), timezones=st.just(UTC)
    )
)
def test_every_moment_belongs_to_a_slot_at_or_before_it_and_within_one_period(
    moment: datetime,
) -> None:
    quarter = Schedule("*/15 * * * *", "Europe/Berlin")
    slot = quarter.slot_of(moment)
    assert slot <= moment
    assert moment - slot < timedelta(minutes=15)


def test_a_start_in_the_hour_dst_repeats_belongs_to_the_slot_of_that_reading() -> None:
    quarter = Schedule("*/15 * * * *", "Europe/Berlin")
    # 01:00 UTC on 2032-10-31 is the second 02:00 of Berlin's wall clock (CET).
    second_reading = datetime(2032, 10, 31, 1, 0, 30, tzinfo=UTC)
    assert quarter.slot_of(second_reading).astimezone(UTC) == datetime(
        2032, 10, 31, 1, 0, tzinfo=UTC
    )
    assert quarter.run_key(second_reading) == "2032-10-31T02:00:00+01:00"
    first_reading = datetime(2032, 10, 31, 0, 0, 30, tzinfo=UTC)
    assert quarter.run_key(first_reading) == "2032-10-31T02:00:00+02:00"
