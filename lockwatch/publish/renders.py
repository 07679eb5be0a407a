"""HTTP answers rendered once per poll, and one request answered at a time.

Answering is Python work that holds the interpreter's lock the poll threads
need: eight browsers reloading the status page of 50,000 locks used to stop
polling for half a minute. An answer is rendered from the board's views once
per poll (per generation of views) and served from memory until the next
poll; and requests take turns to be answered (once they have arrived whole),
the next turn starting after a rest in proportion to the work the last took
(its answer already on its way), so however many readers there are and
whatever they ask for, answering takes at most a quarter of the
interpreter's time and the poll threads keep the rest. A Prometheus scrape
goes ahead of pages and API reads waiting their turn: in a flood, the
alerting path must not be the one told to come back later.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus

from lockwatch.state.board import Board
from lockwatch.state.target_view import TargetView

# Requests answered at once; the rest wait their turn.
ANSWERS_AT_ONCE = 1
# Seconds of rest after each second of answering, the turn kept meanwhile:
# answering gets at most 1 / (1 + REST_PER_WORK) of the interpreter.
REST_PER_WORK = 3.0
# Seconds a request waits for its turn before it is told to come back later.
RENDER_WAIT = 5.0
# Distinct answers (paths, pages, encodings) kept per generation: a client
# asking for every offset in turn must not make the cache the leak.
ANSWERS_KEPT = 64
# Seconds an answer is served at most, even when no poll came since: a page
# must be able to say that polling has stalled.
ANSWER_TTL = 5.0


@dataclass(frozen=True, slots=True)
class Answer:
    status: HTTPStatus
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class Renders:
    """The answers rendered from the board's current views."""

    board: Board
    monotonic: Callable[[], float] = time.monotonic
    wait: float = RENDER_WAIT  # seconds a request waits for its turn
    rest_per_work: float = REST_PER_WORK
    _views: tuple[TargetView, ...] = ()
    _answers: dict[Hashable, tuple[float, Answer]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _turns: threading.Condition = field(default_factory=threading.Condition)
    _answering: int = 0  # requests being answered now, at most ANSWERS_AT_ONCE
    _urgent_waiting: int = 0  # scrapes waiting for their turn: they go first
    _rested_at: float = 0.0  # monotonic; the next answer starts no sooner
    renders_total: int = 0  # how many answers were rendered, not served from memory

    @contextmanager
    def turn(self, *, urgent: bool = False) -> Iterator[bool]:
        """This request's turn to be answered: True once no other request is
        being answered (and, unless ``urgent``, no urgent one waits), False if
        none came within ``wait``."""
        if not self._take_turn(urgent):
            yield False
            return
        # The thread's own CPU time: what it takes from the poll threads.
        started = time.thread_time()
        try:
            # The rest the last answer earned is taken before the next one,
            # so that no answer waits for its own.
            time.sleep(max(0.0, self._rested_at - self.monotonic()))
            yield True
        finally:
            spent = time.thread_time() - started
            with self._turns:
                self._rested_at = self.monotonic() + spent * self.rest_per_work
                self._answering -= 1
                self._turns.notify_all()

    def _take_turn(self, urgent: bool) -> bool:
        def free() -> bool:
            return self._answering < ANSWERS_AT_ONCE and (urgent or not self._urgent_waiting)

        with self._turns:
            self._urgent_waiting += urgent
            try:
                if not self._turns.wait_for(free, timeout=self.wait):
                    return False
                self._answering += 1
                return True
            finally:
                self._urgent_waiting -= urgent
                self._turns.notify_all()

    def answer(self, key: Hashable, render: Callable[[], Answer]) -> Answer:
        """The answer for ``key`` as of the board's views now, rendered at most
        once per generation of them."""
        cached = self._cached(key)
        if cached is not None:
            return cached
        generation = self._views
        rendered_at = self.monotonic()
        answer = render()
        with self._lock:
            self.renders_total += 1
            if self._views is generation:
                if len(self._answers) >= ANSWERS_KEPT:
                    self._answers.pop(next(iter(self._answers)))
                self._answers[key] = (rendered_at, answer)
        return answer

    def _cached(self, key: Hashable) -> Answer | None:
        views = self.board.views()
        with self._lock:
            same = len(views) == len(self._views) and all(
                a is b for a, b in zip(views, self._views, strict=True)
            )
            if not same:
                self._views = views
                self._answers.clear()
            hit = self._answers.get(key)
        if hit is None or self.monotonic() - hit[0] > ANSWER_TTL:
            return None
        return hit[1]
