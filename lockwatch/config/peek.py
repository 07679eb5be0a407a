"""What a reading command needs of a config file (where the daemon keeps and
serves its incidents), read from the file alone.

``lockwatch incidents`` runs beside a daemon whose secrets (DSN files in
``$CREDENTIALS_DIRECTORY``, ``${VAR}`` passwords) it has no use for and
usually no access to: the whole config is not validated, only the few keys
it reads, and a variable that is not set costs only the key that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lockwatch.config.reader import Reading
from lockwatch.config.web import load_web_config
from lockwatch.config.yamldata import FAILED, YamlMap
from lockwatch.settings.incidents import HistoryStore
from lockwatch.settings.targets import check_listen
from lockwatch.settings.web import DEFAULT_LISTEN, WebConfigError

__all__ = ["ConfigPlaces", "peek_places"]


@dataclass(frozen=True, slots=True)
class ConfigPlaces:
    """Where a daemon run with the config keeps and serves its incidents."""

    state_dir: Path | None  # None: the config names none (or cannot be read)
    listen: str
    https: bool  # web_config: TLS
    history_in_store: bool  # incidents.history: pings (a table in pings.dsn)
    notes: tuple[str, ...]  # why a key could not be read, for the command to say


def _text(data: object, loc: str, notes: list[str]) -> str | None:
    if data is FAILED:
        notes.append(f"{loc} cannot be read (a variable it uses is not set)")
        return None
    return data if isinstance(data, str) and data else None


def _https(web_config: str | None, base: Path, notes: list[str]) -> bool:
    """Whether the daemon serves TLS, by its web-config file."""
    if web_config is None:
        return False
    try:
        return load_web_config(base / web_config).tls
    except WebConfigError as exc:
        notes.append(f"web_config cannot be read ({exc.problems[0]}); trying plain HTTP")
        return False


def peek_places(path: Path) -> ConfigPlaces:
    """The places of the config at ``path``; ConfigError when the file is
    no YAML mapping at all."""
    path = Path(path)
    reading = Reading(path, None, {})
    document = reading.document()
    if document is None:
        raise reading.error()
    notes: list[str] = []
    state_dir = _text(document.get("state_dir"), "state_dir", notes)
    listen = _text(document.get("listen"), "listen", notes) or DEFAULT_LISTEN
    if check_listen(listen) is not None:
        notes.append(f"listen {listen!r} is not host:port; asking {DEFAULT_LISTEN}")
        listen = DEFAULT_LISTEN
    https = _https(_text(document.get("web_config"), "web_config", notes), path.parent, notes)
    incidents = document.get("incidents")
    history = incidents.get("history") if isinstance(incidents, YamlMap) else None
    return ConfigPlaces(
        state_dir=None if state_dir is None else path.parent / state_dir,
        listen=listen,
        https=https,
        history_in_store=history == HistoryStore.PINGS.value,
        notes=tuple(notes),
    )
