"""One sender among the replicas of a shard, elected through the shared store.

Replicas watch the same targets and would each send every message. With a
replica name, each one's notifier runs an :class:`Election`: a thread that
tries, every third of the lease, to take or renew the scope's lease in the
shared PostgreSQL store (``state/notify_store.py``). The holder is the
sender; its channels keep their state in the store, written under the lease's
fencing token (:meth:`Election.save`), so a replica that takes over reads
what the last sender told and has in its outbox, and a write from a sender
that lost the lease changes nothing.

The store's clock decides when a lease expires; the sender measures what it
has left on its own monotonic clock from the moment it asked for the renewal
(before the database's ``now()``, so never more than the database grants),
and starts a send only with the send's deadline and a margin left
(:meth:`Election.may_send`): a sender cut off from the store falls silent
before another replica can take over.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from lockwatch.settings.sharding import Shard
from lockwatch.settings.targets import Settings
from lockwatch.state.notify_store import NotifyStore
from lockwatch.state.pgstore import StoreError

log = logging.getLogger(__name__)

Monotonic = Callable[[], float]


def election_scope(shard: Shard, group: str | None = None) -> str:
    """What one sender is elected for: the shard, and the notify group if any.

    >>> election_scope(Shard(0, 1)), election_scope(Shard(1, 3), "eu")
    ('all', 'eu@1/3')
    """
    scope = "all" if shard.count == 1 else str(shard)
    return scope if group is None else f"{group}@{scope}"


class Election:
    """Whether this replica is its scope's sender, kept by a lease in the store."""

    def __init__(
        self,
        store: NotifyStore,
        scope: str,
        replica: str,
        ttl: float,
        *,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        self.store = store
        self.scope = scope
        self.replica = replica
        # One process's claim: a restarted replica waits out its old lease
        # rather than share a token with a process that may not be dead.
        self.holder = f"{replica}/{uuid.uuid4().hex[:8]}"
        self.ttl = ttl
        self.changes_total = 0  # times this replica became or stopped being the sender
        self.errors_total = 0  # store calls that failed
        self._monotonic = monotonic
        self._token: int | None = None
        self._valid_until = -math.inf
        self._leading = False  # as last logged and counted
        self._failing: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the channels ask ----------------------------------------------

    @property
    def term(self) -> int | None:
        """The fencing token while this replica holds an unexpired lease, else None."""
        with self._lock:
            if self._token is None or self._monotonic() >= self._valid_until:
                return None
            return self._token

    @property
    def sender(self) -> bool:
        return self.term is not None

    def may_send(self, seconds: float) -> bool:
        """Whether the lease outlasts a send of ``seconds``: checked before each one."""
        with self._lock:
            return self._token is not None and self._valid_until - self._monotonic() > seconds

    def load(self, channel: str) -> dict[str, Any] | None:
        """The channel's state as the last sender saved it; raises StoreError."""
        return self.store.load(self.scope, channel)

    def save(self, channel: str, document: Mapping[str, Any], token: int) -> bool:
        """Save the channel's state under ``token``; False when the store refused
        it (the lease lapsed or changed hands) or could not be reached."""
        try:
            saved = self.store.save(self.scope, channel, document, self.holder, token)
        except StoreError as exc:
            self._failed(str(exc))
            return False
        if not saved:
            log.warning(
                "notify %s: the shared store refused a save under lease token %d: "
                "another replica is the sender now",
                channel,
                token,
            )
        return saved

    # -- the lease ----------------------------------------------------------

    def try_once(self) -> None:
        """Take or renew the lease once, and note what changed."""
        asked = self._monotonic()
        try:
            token = self.store.acquire(self.scope, self.holder, self.ttl)
        except StoreError as exc:
            self._failed(str(exc))
        else:
            if self._failing is not None:
                log.info("notify: the shared store answers again")
                self._failing = None
            with self._lock:
                self._token = token
                if token is not None:
                    self._valid_until = asked + self.ttl
        self._note()

    def _failed(self, reason: str) -> None:
        self.errors_total += 1
        if reason != self._failing:
            log.error("notify: %s; retrying every %.1fs", reason, self.ttl / 3)
            self._failing = reason

    def _note(self) -> None:
        term = self.term
        leading = term is not None
        if leading == self._leading:
            return
        self._leading = leading
        self.changes_total += 1
        if leading:
            log.warning(
                "notify: replica %s is the sender for %s now (lease token %d, %gs)",
                self.replica,
                self.scope,
                term,
                self.ttl,
            )
        else:
            log.warning(
                "notify: replica %s is no longer the sender for %s: %s",
                self.replica,
                self.scope,
                "it stopped"
                if self._stop.is_set()
                else "its lease lapsed"
                if self._failing is None
                else self._failing,
            )

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"notify-election-{self.scope}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_once()
            except Exception:
                log.exception("notify: unexpected error in the sender election; it goes on")
            self._stop.wait(self.ttl / 3)

    def stop(self, timeout: float, *, release: bool = True) -> None:
        """Stop trying and (with ``release``) release a held lease, so another
        replica takes over at its next try instead of when the lease runs out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            token, self._token = self._token, None
        if token is not None and not release:
            log.warning("notify: a delivery is still under way: the lease is left to run out")
        elif token is not None:
            try:
                self.store.release(self.scope, self.holder, token)
            except StoreError as exc:
                log.warning("notify: the lease could not be released: %s", exc)
            else:
                log.info("notify: replica %s released the sender's lease", self.replica)
        self._note()
        self.store.close()


def open_election(settings: Settings, shard: Shard) -> Election | None:
    """The election the settings ask for: one with a replica name and notify
    channels (the config loader makes sure the store is there)."""
    if settings.replica is None or not settings.notify.channels:
        return None
    assert settings.pings.store_dsn is not None  # check_sender_election
    store = NotifyStore(settings.pings.store_dsn, timeout=min(5.0, settings.notify.lease / 3))
    scope = election_scope(shard, settings.notify.group)
    return Election(store, scope, settings.replica, settings.notify.lease)
