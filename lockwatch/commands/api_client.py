"""A client of a running lockwatch's JSON API (``/api/v1/*``), with the basic
auth and TLS its web-config file asks for: what ``lockwatch mcp`` reads.

Reading the daemon, rather than its state dir, gives what only the running
daemon has (the locks now, queues, jobs) and the very documents the API
serves, secrets already redacted the way the API redacts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests

from lockwatch.util.secrets import first_line, redact

DEFAULT_TIMEOUT = 10.0


class ApiError(RuntimeError):
    """The daemon could not be reached or answered with an error; the message
    is free of the password."""


@dataclass
class ApiClient:
    url: str  # http(s)://host:port of the daemon
    user: str | None = None  # basic auth, when its web-config file asks for it
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None  # the CA that signed its TLS certificate; None: the system's
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        self._session = requests.Session()
        if self.user is not None:
            self._session.auth = (self.user, self.password or "")
        # Per request: a session's verify loses to REQUESTS_CA_BUNDLE in the environment.
        self._verify: str | bool = self.ca_file if self.ca_file is not None else True

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """The JSON document at ``path`` (``/api/v1/...``)."""
        secrets = (self.password,) if self.password else ()
        try:
            answer = self._session.get(
                self.url.rstrip("/") + path,
                params=params,
                timeout=self.timeout,
                verify=self._verify,
            )
        except requests.RequestException as exc:
            raise ApiError(redact(f"lockwatch at {self.url}: {first_line(exc)}", secrets)) from None
        if answer.status_code == 404 and path.startswith("/api/v1/incidents/"):
            raise ApiError(f"no incident {path.rsplit('/', 1)[-1]!r} is kept")
        if not answer.ok:
            said = first_line(ValueError(answer.text[:300])) if answer.text else answer.reason
            raise ApiError(redact(f"lockwatch at {self.url}: {answer.status_code} {said}", secrets))
        document: dict[str, Any] = answer.json()
        return document

    def incident(self, incident_id: str) -> dict[str, Any]:
        document = self.get(f"/api/v1/incidents/{quote(incident_id, safe='')}")
        incident: dict[str, Any] = document["incident"]
        return incident

    def close(self) -> None:
        self._session.close()
