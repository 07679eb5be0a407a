"""TLS and basic auth for the HTTP endpoint, from the web-config file that
Prometheus exporters read (prometheus/exporter-toolkit)::

    tls_server_config:
      cert_file: server.crt        # relative paths are meant from this file
      key_file: server.key
      client_ca_file: ca.crt       # optional, with client_auth_type
      client_auth_type: RequireAndVerifyClientCert
      min_version: TLS12
    basic_auth_users:
      prometheus: $2y$10$...       # bcrypt hashes (htpasswd -nBC 10 prometheus)

Prometheus scrapes it with the same ``tls_config`` and ``basic_auth`` it
gives any exporter. Keys this file format has but lockwatch does not honour
are refused, never silently ignored: a setting that looks applied and is not
would be worse than an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import ssl
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

_BCRYPT = re.compile(r"\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}")
_TLS_KEYS = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version")
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Successful logins remembered, so a scrape costs one bcrypt check, not one per request.
_CACHE_SIZE = 64


class WebConfigError(Exception):
    """Everything wrong with a web-config file, each as ``file: key: what``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class WebConfig:
    source: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    users: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # name, bcrypt hash

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def ssl_context(self) -> ssl.SSLContext:
        """The server's TLS context; OSError (with the file named) when a file won't load."""
        assert self.cert_file is not None and self.key_file is not None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = _VERSIONS[self.min_version]
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file is not None:
                context.load_verify_locations(self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"{self.source}: cannot load the TLS certificate or key: {exc}") from None
        context.verify_mode = _CLIENT_AUTH[self.client_auth_type]
        return context


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


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against the bcrypt hashes.

    Time spent does not tell whether a user exists: an unknown name is checked
    against a hash of a random password, and names are compared in constant
    time. Only successful logins are remembered, as digests.
    """

    def __init__(self, users: tuple[tuple[str, str], ...]) -> None:
        self._users = [(name.encode(), hashed.encode()) for name, hashed in users]
        self._decoy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt())
        self._good: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> tuple[bool, str]:
        """(accepted, the user name given, for the log; never the password)."""
        credentials = _basic(header)
        if credentials is None:
            return False, ""
        user, password = credentials
        hashed = self._decoy
        for name, candidate in self._users:
            if hmac.compare_digest(name, user):
                hashed = candidate
        digest = hashlib.sha256(user + b"\0" + password + b"\0" + hashed).digest()
        with self._lock:
            if digest in self._good:
                self._good.move_to_end(digest)
                return True, user.decode(errors="replace")
        accepted = bcrypt.checkpw(password, hashed) and hashed is not self._decoy
        if accepted:
            with self._lock:
                self._good[digest] = None
                while len(self._good) > _CACHE_SIZE:
                    self._good.popitem(last=False)
        return accepted, user.decode(errors="replace")


def _basic(header: str | None) -> tuple[bytes, bytes] | None:
    """
    >>> _basic("Basic dXNlcjpwYTpzcw==")
    (b'user', b'pa:ss')
    >>> _basic("Bearer x") is None, _basic("Basic !!") is None
    (True, True)
    """
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None
