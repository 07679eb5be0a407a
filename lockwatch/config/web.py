from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from lockwatch.settings.web import _CLIENT_AUTH, _VERSIONS, WebConfig, WebConfigError

_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")


_TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version")


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
    for key in document.keys() - {"tls_server_config", "basic_auth_users"}:
        problem(str(key), "not supported by lockwatch (tls_server_config, basic_auth_users)")
    tls = _tls(path, document.get("tls_server_config"), problem)
    users = _users(document.get("basic_auth_users"), problem)
    if problems:
        raise WebConfigError(problems)
    return WebConfig(source=path, users=users, **tls)


def _tls(path: Path, section: object, problem: Any) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        problem("tls_server_config", "must be a mapping")
        return {}
    for key in section.keys() - set(_TLS_KEYS):
        problem(f"tls_server_config.{key}", f"not supported by lockwatch ({', '.join(_TLS_KEYS)})")
    values: dict[str, Any] = {}
    for key in ("cert_file", "key_file", "client_ca_file"):
        if key not in section:
            continue
        file = path.parent / str(section[key])
        if not file.is_file():
            problem(f"tls_server_config.{key}", f"no such file: {file}")
        values[key] = file
    if ("cert_file" in values) != ("key_file" in values):
        problem("tls_server_config", "needs both cert_file and key_file")
    for key, allowed in (("client_auth_type", _CLIENT_AUTH), ("min_version", _VERSIONS)):
        if key in section:
            if section[key] not in allowed:
                problem(f"tls_server_config.{key}", f"one of {', '.join(allowed)}")
            values[key] = str(section[key])
    if _CLIENT_AUTH.get(values.get("client_auth_type", "")) and "client_ca_file" not in values:
        problem("tls_server_config.client_ca_file", "needed to verify client certificates")
    return values


def _users(section: object, problem: Any) -> tuple[tuple[str, str], ...]:
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        problem("basic_auth_users", "must be a mapping of user names to bcrypt hashes")
        return ()
    users = []
    for name, hashed in section.items():
        if not isinstance(name, str) or not name or ":" in name:
            problem(f"basic_auth_users.{name}", "a user name is text without ':'")
        elif not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            # Never echo the value: it may be a password written in by mistake.
            problem(f"basic_auth_users.{name}", "not a bcrypt hash (htpasswd -nBC 10 USER)")
        else:
            users.append((name, hashed))
    return tuple(users)
