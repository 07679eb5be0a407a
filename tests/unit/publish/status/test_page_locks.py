"""The status page of many targets: the first few targets' locks one by one,
those with problems first, and every target's counts in the targets table."""

from __future__ import annotations

import re

from lockwatch.model.findings import Severity
from lockwatch.publish.status.history import sparkline
from lockwatch.publish.status.locks import DETAILED_TARGETS, LOCKS_SHOWN
from lockwatch.settings.locks import LockSettings
from lockwatch.state.target_view import TargetView
from tests.fixtures.incident_values import incident
from tests.fixtures.snapshots import held, snapshot, waiting
from tests.unit.publish.api.test_documents import finding, view_of
from tests.unit.publish.status.test_page import render


def fleet(count: int, locks: int = 3) -> list[TargetView]:
    return [
        view_of(
            snapshot(*(held(k, 100 + k, held_for=k) for k in range(1, locks + 1)), target=name),
            name=name,
        )
        for name in (f"t{n:03d}" for n in range(count))
    ]


def detailed(page: str) -> list[str]:
    """The targets whose locks the page shows one by one, in order."""
    section = page.split('<section id="locks">')[1].split("</section>", maxsplit=1)[0]
    return re.findall(r"<h3>([^<]*)</h3>", section)


def test_a_fleet_shows_the_locks_of_only_the_first_targets_and_counts_the_others() -> None:
    page = render(*fleet(DETAILED_TARGETS + 5))

    assert detailed(page) == [f"t{n:03d}" for n in range(DETAILED_TARGETS)]
    assert "and 5 more targets, 15 held and 0 waiting between them" in page
    assert page.count('<div class="lock">') == 3 * DETAILED_TARGETS


def test_targets_with_incidents_findings_or_down_come_first_and_the_worst_incident_leads() -> None:
    views = fleet(DETAILED_TARGETS + 5)
    views[12] = view_of(None, name="t012", error="connection refused")
    warned = finding(Severity.WARNING, 60, target="t013")
    views[13] = TargetView(views[13].target, views[13].status, findings=(warned,))
    critical = finding(Severity.CRITICAL, 60, target="t014")
    views[14] = TargetView(
        views[14].target,
        views[14].status,
        findings=(critical,),
        incidents=(incident([critical]),),
    )

    assert detailed(render(*views))[:4] == ["t014", "t013", "t012", "t000"]


def test_each_target_row_counts_its_locks_and_links_to_them_in_the_api() -> None:
    view = view_of(
        snapshot(held(1, 100), held(2, 101), waiting(2, 102), held(3, 103), target="db 1&2"),
        LockSettings(ignore=(held(3, 103).key,)),
        name="db 1&2",
    )

    page = render(view)

    assert '<a href="/api/v1/locks?target=db+1%262">2 held, 1 waiting</a>' in page


def test_a_target_with_more_locks_than_shown_links_to_its_next_page_in_the_api() -> None:
    (view,) = fleet(1, locks=LOCKS_SHOWN + 1)

    assert "/api/v1/locks?target=t000&amp;offset=20" in render(view)


def test_a_flat_hour_is_drawn_with_its_ends_only() -> None:
    quiet = [(float(3600 - 10 * n), 0.0) for n in range(361)]

    svg = sparkline([*quiet, (0.0, 3.0)], window=3600.0, width=120, height=40)

    assert 'points="0.0,38.0 120.0,38.0 120.0,2.0"' in svg
