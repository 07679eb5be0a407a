"""``POST /ping/<job>/start|success|fail``: jobs report their runs.

Everything a client sends is checked before anything is stored: the token
(in a header, compared in constant time, never logged), the job name against
the configured jobs, the size and shape of the body. A bad request changes
nothing and gets a 4xx that says what was wrong.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from lockwatch.state.jobstore import JobStore, PingEvent, StoreError

log = logging.getLogger(__name__)

MAX_BODY = 16 * 1024
EVENTS = ("start", "success", "fail")
TOKEN_HEADER = "X-Lockwatch-Token"  # noqa: S105 (a header name, not a secret)
_FIELDS: dict[str, tuple[type, ...]] = {
    "run_key": (str,),
    "run_id": (str,),
    "host": (str,),
    "exit_code": (int,),
    "duration": (int, float),
}
_LIMITS = {"run_key": 200, "run_id": 100, "host": 255}


@dataclass(frozen=True, slots=True)
class PingResponse:
    status: HTTPStatus
    body: dict[str, Any]


def _error(status: HTTPStatus, message: str) -> PingResponse:
    return PingResponse(status, {"ok": False, "error": message})


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The token a client sent: ``Authorization: Bearer T`` or ``X-Lockwatch-Token: T``."""
    lowered = {name.lower(): value for name, value in headers.items()}
    authorization = lowered.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return lowered.get(TOKEN_HEADER.lower())


def _parse_body(body: bytes) -> dict[str, Any] | str:
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"body is not valid JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else 'not UTF-8'}"
    if not isinstance(data, dict):
        return "body must be a JSON object"
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        return f"unknown field(s) {', '.join(unknown)[:200]}; expected some of {', '.join(_FIELDS)}"
    for name, value in data.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, _FIELDS[name]):
            return f"{name} has the wrong type"
        if isinstance(value, str) and len(value) > _LIMITS[name]:
            return f"{name} is longer than {_LIMITS[name]} characters"
        if isinstance(value, int | float) and name == "duration" and value < 0:
            return "duration must not be negative"
    return data


@dataclass
class PingReceiver:
    """Turns ping requests into runs in the store."""

    jobs: Collection[str]
    token: str | None
    store: JobStore
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    on_ping: Callable[[str], None] | None = None  # lets the daemon re-check that job at once

    def handle(
        self, path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> PingResponse:
        if "token" in parse_qs(query):
            # The URL ends up in proxies' and servers' logs; a token there is leaked.
            return _error(
                HTTPStatus.BAD_REQUEST,
                "send the token in a header (Authorization: Bearer …), never in the URL",
            )
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "ping" or parts[3] not in EVENTS:
            return _error(HTTPStatus.NOT_FOUND, "use POST /ping/<job>/start|success|fail")
        job, event = parts[2], parts[3]
        if self.token is None:
            return _error(HTTPStatus.FORBIDDEN, "pings are disabled: no ping token is configured")
        presented = presented_token(headers)
        if presented is None:
            return _error(
                HTTPStatus.UNAUTHORIZED,
                f"missing token: send Authorization: Bearer … or {TOKEN_HEADER}",
            )
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            return _error(HTTPStatus.FORBIDDEN, "wrong token")
        if job not in self.jobs:
            return _error(HTTPStatus.NOT_FOUND, "unknown job (it must be configured under jobs)")
        if len(body) > MAX_BODY:
            return _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {MAX_BODY} bytes")
        data = _parse_body(body)
        if isinstance(data, str):
            return _error(HTTPStatus.BAD_REQUEST, data)
        try:
            run = self.store.record(
                PingEvent(
                    job=job,
                    event=event,
                    at=self.clock(),
                    run_id=data.get("run_id"),
                    run_key=data.get("run_key"),
                    host=data.get("host"),
                    exit_code=data.get("exit_code"),
                    duration=data.get("duration"),
                )
            )
        except StoreError as exc:
            log.error("ping for job %s not stored: %s", job, exc)
            return _error(
                HTTPStatus.SERVICE_UNAVAILABLE, "the run store is unavailable; retry later"
            )
        if self.on_ping is not None:
            self.on_ping(job)
        return PingResponse(
            HTTPStatus.OK,
            {
                "ok": True,
                "job": job,
                "event": event,
                "run_id": run.run_id,
                "status": run.status.value,
            },
        )
