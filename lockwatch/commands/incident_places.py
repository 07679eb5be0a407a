"""Where ``lockwatch incidents`` finds the daemon's incidents, however the
daemon was told where to keep them: a state dir given to the command
(``--state-dir``, ``LOCKWATCH_STATE_DIR``: the daemon's, as systemd hands it
``--state-dir``), the running daemon's API (``--url``, or the config's
``listen``), or the config's ``state_dir`` once no daemon answers.

It never needs the config's secrets (``config/peek.py``), never moves or
repairs a file of the daemon's (only the daemon repairs its files), and says
what it could not look at rather than "no incidents".
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from lockwatch.config.peek import ConfigPlaces
from lockwatch.model.incidents import Incident, load_incident
from lockwatch.settings.incidents import HistoryStore
from lockwatch.settings.targets import Settings, parse_listen
from lockwatch.settings.web import DEFAULT_LISTEN
from lockwatch.state.incident_history import FileHistory, open_history
from lockwatch.state.statefile import StateStore

API_TIMEOUT = 5.0  # seconds per request to the daemon
PAGE = 500  # the API's largest page


class CannotLookError(Exception):
    """Nowhere to read incidents from; the message says where it looked."""


@dataclass
class Found:
    """The incidents read, where from, and what could not be read there."""

    incidents: list[Incident]
    source: str
    problems: list[str] = field(default_factory=list)  # what could not be read
    notes: list[str] = field(default_factory=list)  # what else is worth knowing


def daemon_url(listen: str, https: bool = False) -> str:
    """The address to ask a daemon listening on ``listen`` (every interface: loopback).

    >>> daemon_url("0.0.0.0:10057"), daemon_url("[::]:9000", https=True)
    ('http://127.0.0.1:10057', 'https://[::1]:9000')
    """
    host, port = parse_listen(listen)
    # Every interface includes loopback, which is where to ask.
    everywhere = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104
    host = everywhere.get(host, host)
    try:
        shown = f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        shown = host
    return f"{'https' if https else 'http'}://{shown}:{port}"


def from_state_dir(directory: Path) -> Found:
    """What the daemon saved in ``directory``: each target's open incidents
    and the resolved ones of the history file, read and left as they are."""
    if not directory.is_dir():
        raise CannotLookError(f"the state dir {directory} does not exist (or is not a directory)")
    store = StateStore(directory)
    problems: list[str] = []
    history = FileHistory(directory, reader=True)
    if history.problem is not None:
        problems.append(f"the resolved incidents cannot be read: {history.problem}")
    known = {incident.id: incident for incident in history.resolved()}
    names = store.saved_names()
    for name in names:
        document, problem = store.peek(name)
        if problem is not None:
            problems.append(f"target {name}'s open incidents cannot be read: {problem}")
        for entry in (document or {}).get("incidents") or []:
            incident = load_incident(entry.get("incident") if isinstance(entry, dict) else None)
            if incident is not None:
                known.setdefault(incident.id, incident)
    if not names and not known and not problems and not any(directory.iterdir()):
        problems.append(f"the state dir {directory} is empty: is it the daemon's?")
    return Found(list(known.values()), f"state dir {directory}", problems)


def shown_url(url: str) -> str:
    """``url`` without the user and password it may carry.

    >>> shown_url("http://ops:s3cret@127.0.0.1:10057")
    'http://127.0.0.1:10057'
    """
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _get(url: str, path: str, params: dict[str, Any] | None = None) -> requests.Response:
    return requests.get(f"{url}{path}", params=params, timeout=API_TIMEOUT)


def from_daemon(url: str, incident_id: str | None = None) -> Found:
    """Every incident the daemon at ``url`` knows (or the one ``incident_id``);
    CannotLookError when it does not answer as lockwatch does."""
    shown = shown_url(url)
    try:
        if incident_id is not None:
            answer = _get(url, f"/api/v1/incidents/{quote(incident_id, safe='')}")
            if answer.status_code == 404:
                return Found([], f"the daemon at {shown}")
            answer.raise_for_status()
            found = load_incident(answer.json().get("incident"))
            return Found([] if found is None else [found], f"the daemon at {shown}")
        return Found(_pages(url), f"the daemon at {shown}")
    except requests.RequestException as exc:
        reason = type(exc).__name__  # its text may quote the URL, password and all
        if isinstance(exc, requests.ConnectionError):
            reason = "nothing answers there"
        elif isinstance(exc, requests.Timeout):
            reason = f"no answer within {API_TIMEOUT:g}s"
        if isinstance(exc, requests.HTTPError) and exc.response is not None:
            reason = f"it answered {exc.response.status_code} {exc.response.reason}"
            if exc.response.status_code == 401:
                reason += " (give --url http://user:password@host:port)"
        raise CannotLookError(f"the daemon at {shown} did not answer: {reason}") from None
    except ValueError:
        raise CannotLookError(f"{shown} answered, but not as lockwatch does") from None


def _pages(url: str) -> list[Incident]:
    incidents: list[Incident] = []
    cursor: str | None = "0"
    while cursor is not None:
        answer = _get(url, "/api/v1/incidents", {"limit": PAGE, "cursor": cursor})
        answer.raise_for_status()
        document = answer.json()
        incidents += [i for i in map(load_incident, document["incidents"]) if i is not None]
        cursor = document.get("next_cursor")
    return incidents


def _kept_in_store(found: Found, places: ConfigPlaces | None) -> Found:
    if places is not None and places.history_in_store:
        found.notes.append(
            "the config keeps resolved incidents in the pings' store (incidents.history: "
            "pings), not in the state dir: ask the running daemon (--url) for them"
        )
    return found


def find_incidents(
    places: ConfigPlaces | None,
    state_dir: Path | None,
    url: str | None,
    incident_id: str | None = None,
) -> Found:
    """The incidents from the first place that can be read: a state dir given
    to the command, the daemon (at ``url`` or the config's address), the
    config's state dir. CannotLookError names every place it tried."""
    if state_dir is not None:
        return _kept_in_store(from_state_dir(state_dir), places)
    tried: list[str] = []
    if url is None:
        listen = DEFAULT_LISTEN if places is None else places.listen
        url = daemon_url(listen, places is not None and places.https)
    try:
        return from_daemon(url.rstrip("/"), incident_id)
    except CannotLookError as exc:
        tried.append(str(exc))
    if places is not None and places.state_dir is not None:
        found = _kept_in_store(from_state_dir(places.state_dir), places)
        # Said, so that nobody takes what was saved for what is open now.
        found.notes += [*tried, "read what the daemon saved instead"]
        return found
    tried += list(places.notes) if places is not None else []
    tried.append(
        "no state dir is known: give the daemon's with --state-dir (or LOCKWATCH_STATE_DIR; "
        "under systemd, /var/lib/lockwatch)"
    )
    raise CannotLookError("; ".join(tried))


def known_incidents(settings: Settings) -> list[Incident]:
    """Every incident the daemon run with ``settings`` keeps, for a command
    that has the whole config (``terminate``): what it saved in its state dir
    (the resolved ones in its history, which win over a stale open copy, from
    the pings' store when the config keeps them there), else what its API
    answers at the config's address; none when neither can be read."""
    history = None
    if settings.incidents.history is HistoryStore.PINGS and settings.pings.store_dsn:
        history = open_history(settings)
    try:
        known: dict[str, Incident] = {}
        if history is not None:
            known = {incident.id: incident for incident in history.resolved()}
        if settings.state_dir is not None:
            found = from_state_dir(settings.state_dir)
        else:
            https = settings.web is not None and settings.web.tls
            found = from_daemon(daemon_url(settings.listen, https))
    except CannotLookError:
        return list(known.values())
    finally:
        if history is not None:
            history.close()
    for incident in found.incidents:
        known.setdefault(incident.id, incident)
    return list(known.values())
