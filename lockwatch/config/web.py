"""The web-config file of Prometheus exporters (``web_config:``, ``--web-config``).

Its keys are :class:`~lockwatch.settings.web.WebConfig`'s: the TLS ones under
``tls_server_config``, the users as ``basic_auth_users``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from lockwatch.config.reader import Reading
from lockwatch.config.yamldata import FAILED, Loc
from lockwatch.settings.fields import FilePath
from lockwatch.settings.web import _CLIENT_AUTH, _VERSIONS, WebConfig, WebConfigError

_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")
_TLS = "tls_server_config"
_USERS = "basic_auth_users"
_TLS_KEYS = tuple(f.name for f in fields(WebConfig) if f.name not in ("source", "users"))
_FILE_KEYS = tuple(key for key in _TLS_KEYS if key.endswith("_file"))
_CHOICES: tuple[tuple[str, Mapping[str, object]], ...] = (
    ("client_auth_type", _CLIENT_AUTH),
    ("min_version", _VERSIONS),
)

Problem = Callable[[str, str], None]


def read_web_config(reading: Reading, raw: object, loc: Loc) -> object:
    """``web_config:`` in a config file: the file it names, read; its problems reported there."""
    path = reading.value(FilePath, raw, loc)
    if path is FAILED:
        return FAILED
    try:
        return load_web_config(path)
    except WebConfigError as exc:
        for problem in exc.problems:
            reading.report(loc, problem)
    return FAILED


def load_web_config(path: Path) -> WebConfig:
    """Read and check a web-config file; WebConfigError lists every problem."""
    problems: list[str] = []

    def problem(key: str, what: str) -> None:
        problems.append(f"{path}: {key}: {what}")

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError([f"{path}: cannot read: {exc}"]) from None
    except yaml.YAMLError as exc:
        raise WebConfigError([f"{path}: not YAML: {exc}"]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise WebConfigError([f"{path}: must be a mapping"])
    for key in document.keys() - {_TLS, _USERS}:
        problem(str(key), f"not supported by lockwatch ({_TLS}, {_USERS})")
    tls = _tls(path, document.get(_TLS), problem)
    users = _users(document.get(_USERS), problem)
    if problems:
        raise WebConfigError(problems)
    return WebConfig(source=path, users=users, **tls)


def _tls(path: Path, section: object, problem: Problem) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problem(_TLS, "must be a mapping")
        return {}
    for key in section.keys() - set(_TLS_KEYS):
        problem(f"{_TLS}.{key}", f"not supported by lockwatch ({', '.join(_TLS_KEYS)})")
    values: dict[str, Any] = {}
    for key in _FILE_KEYS:
        if key not in section:
            continue
        file = path.parent / str(section[key])
        if not file.is_file():
            problem(f"{_TLS}.{key}", f"no such file: {file}")
        values[key] = file
    if ("cert_file" in values) != ("key_file" in values):
        problem(_TLS, "needs both cert_file and key_file")
    for key, allowed in _CHOICES:
        if key in section:
            if section[key] not in allowed:
                problem(f"{_TLS}.{key}", f"one of {', '.join(allowed)}")
            values[key] = str(section[key])
    if _CLIENT_AUTH.get(values.get("client_auth_type", "")) and "client_ca_file" not in values:
        problem(f"{_TLS}.client_ca_file", "needed to verify client certificates")
    return values


def _users(section: object, problem: Problem) -> tuple[tuple[str, str], ...]:
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        problem(_USERS, "must be a mapping of user names to bcrypt hashes")
        return ()
    users = []
    for name, hashed in section.items():
        if not isinstance(name, str) or not name or ":" in name:
            problem(f"{_USERS}.{name}", "a user name is text without ':'")
        elif not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            # Never echo the value: it may be a password written in by mistake.
            problem(f"{_USERS}.{name}", "not a bcrypt hash (htpasswd -nBC 10 USER)")
        else:
            users.append((name, hashed))
    return tuple(users)
