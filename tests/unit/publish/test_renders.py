"""Answers rendered once per poll, one render at a time, and /api/v1/locks by pages."""

from __future__ import annotations

import threading
import time
from http import HTTPStatus

from lockwatch.publish.api.locks import Page, locks_document
from lockwatch.publish.renders import ANSWER_TTL, ANSWERS_KEPT, Answer, Renders
from lockwatch.state.board import Board
from tests.fixtures.snapshots import NOW, held, snapshot
from tests.unit.publish.api.test_documents import view_of


class Counted:
    """A render that counts its calls and answers with the count."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Answer:
        self.calls += 1
        return Answer(HTTPStatus.OK, "text/plain", str(self.calls).encode())


def test_an_answer_is_rendered_once_per_poll_however_often_it_is_asked_for() -> None:
    board = Board()
    board.publish(view_of(snapshot(held(1, 100, held_for=5))))
    renders, render = Renders(board), Counted()

    bodies = [renders.answer("/", render) for _ in range(20)]

    assert render.calls == 1
    assert {a.body for a in bodies} == {b"1"}
    board.publish(view_of(snapshot(held(1, 100, held_for=6))))
    again = renders.answer("/", render)
    assert again.body == b"2"
    assert renders.renders_total == 2


def test_an_answer_kept_past_its_ttl_is_rendered_again_without_a_poll() -> None:
    board, now = Board(), [0.0]
    board.publish(view_of(snapshot()))
    renders, render = Renders(board, monotonic=lambda: now[0]), Counted()
    renders.answer("/", render)
    now[0] = ANSWER_TTL + 0.1

    renders.answer("/", render)

    assert render.calls == 2


def test_distinct_pages_are_kept_only_up_to_a_bound() -> None:
    board = Board()
    board.publish(view_of(snapshot()))
    renders, render = Renders(board), Counted()

    for offset in range(3 * ANSWERS_KEPT):
        renders.answer(("locks", offset), render)

    assert len(renders._answers) == ANSWERS_KEPT


def test_a_request_that_finds_the_turn_taken_waits_then_is_told_to_come_back() -> None:
    renders = Renders(Board(), wait=0.05)
    taken, release = threading.Event(), threading.Event()

    def answering() -> None:
        with renders.turn() as turn:
            assert turn
            taken.set()
            release.wait(30)

    first = threading.Thread(target=answering)
    first.start()
    assert taken.wait(10)
    try:
        with renders.turn() as second:
            refused = not second
    finally:
        release.set()
        first.join(10)
    with renders.turn() as third:
        assert third  # the turn comes back once the first is answered

    assert refused


def test_a_scrape_waiting_for_its_turn_goes_before_the_pages_and_api_reads() -> None:
    renders = Renders(Board(), wait=30, rest_per_work=0.0)
    taken, release = threading.Event(), threading.Event()
    order: list[str] = []

    def answering() -> None:
        with renders.turn() as turn:
            assert turn
            taken.set()
            release.wait(30)

    def waiting(name: str, urgent: bool) -> None:
        with renders.turn(urgent=urgent) as turn:
            assert turn
            order.append(name)

    first = threading.Thread(target=answering)
    first.start()
    assert taken.wait(10)
    page = threading.Thread(target=waiting, args=("page", False))
    page.start()
    scrape = threading.Thread(target=waiting, args=("scrape", True))
    scrape.start()
    # Both wait on the turn's condition (CPython keeps its waiters in a list).
    deadline = time.monotonic() + 10
    while len(renders._turns._waiters) < 2 and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.001)
    assert len(renders._turns._waiters) == 2  # type: ignore[attr-defined]
    release.set()
    for thread in (first, page, scrape):
        thread.join(10)

    assert order == ["scrape", "page"]


def test_locks_come_in_pages_with_their_total_and_the_next_offset() -> None:
    snap = snapshot(*(held(k, 100 + k % 3, held_for=1000 - k) for k in range(1, 26)))
    views = [view_of(snap)]

    pages = []
    offset: int | None = 0
    while offset is not None:
        (entry,) = locks_document(views, NOW, page=Page(limit=10, offset=offset))["targets"]
        pages.append([lock["key"] for lock in entry["locks"]])
        assert entry["locks_total"] == 25
        offset = entry["next_offset"]

    assert [len(p) for p in pages] == [10, 10, 5]
    (whole,) = locks_document(views, NOW)["targets"]
    assert [k for p in pages for k in p] == [lock["key"] for lock in whole["locks"]]
    assert pages[0][0] == "1"  # the longest-held first


def test_a_shown_cut_counts_what_it_left_out_without_building_it() -> None:
    snap = snapshot(*(held(k, 100, held_for=1000 - k) for k in range(1, 31)))

    (entry,) = locks_document([view_of(snap)], NOW, shown=12)["targets"]

    assert len(entry["locks"]) == 12
    assert entry["locks_left_out"] == 18


def test_a_page_of_one_target_names_only_that_targets_locks() -> None:
    views = [
        view_of(snapshot(held(k, 100), target=name), name=name) for k, name in ((1, "a"), (2, "b"))
    ]

    document = locks_document(views, NOW, page=Page(limit=10, target="b"))

    assert [(t["target"], [lock["key"] for lock in t["locks"]]) for t in document["targets"]] == [
        ("b", ["2"])
    ]
