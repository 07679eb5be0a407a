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

from lockwatch.state.jobstore import JobStore, PingEvent
from lockwatch.state.pgstore import StoreError

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
    "pid": (int,),
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


class _RefusedError(Exception):
    """A ping refused with ``status`` and a message for the client."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _field_problem(name: str, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, _FIELDS[name]):
        return f"{name} has the wrong type"
    if isinstance(value, str) and len(value) > _LIMITS[name]:
        return f"{name} is longer than {_LIMITS[name]} characters"
    if isinstance(value, int | float) and name == "duration" and value < 0:
        return "duration must not be negative"
    if isinstance(value, int) and name == "pid" and not 0 < value < 2**31:
        return "pid must be a process id"
    return None


def _parse_body(body: bytes) -> dict[str, Any]:
    """The ping's fields; raises _RefusedError saying what is wrong with the body."""
    if len(body) > MAX_BODY:
        raise _RefusedError(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {MAX_BODY} bytes"
        )
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise _RefusedError(HTTPStatus.BAD_REQUEST, f"body is not valid JSON: {reason}") from None
    if not isinstance(data, dict):
        raise _RefusedError(HTTPStatus.BAD_REQUEST, "body must be a JSON object")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise _RefusedError(
            HTTPStatus.BAD_REQUEST,
            f"unknown field(s) {', '.join(unknown)[:200]}; expected some of {', '.join(_FIELDS)}",
        )
    for name, value in data.items():
        problem = None if value is None else _field_problem(name, value)
        if problem is not None:
            raise _RefusedError(HTTPStatus.BAD_REQUEST, problem)
    return data


@dataclass
class PingReceiver:
    """Turns ping requests into runs in the store."""

    jobs: Collection[str]
    token: str | None
    store: JobStore
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    on_ping: Callable[[str], None] | None = None  # lets the daemon re-check that job at once

    def _addressed(self, path: str, query: str, headers: Mapping[str, str]) -> tuple[str, str]:
        """The job and event a ping is for, once it proves it may send them;
        raises _RefusedError otherwise."""
        if "token" in parse_qs(query):
            # The URL ends up in proxies' and servers' logs; a token there is leaked.
            raise _RefusedError(
                HTTPStatus.BAD_REQUEST,
                "send the token in a header (Authorization: Bearer …), never in the URL",
            )
        parts = path.split("/")
        if len(parts) != 4 or parts[1] != "ping" or parts[3] not in EVENTS:
            raise _RefusedError(HTTPStatus.NOT_FOUND, "use POST /ping/<job>/start|success|fail")
        job, event = parts[2], parts[3]
        if self.token is None:
            raise _RefusedError(
                HTTPStatus.FORBIDDEN, "pings are disabled: no ping token is configured"
            )
        presented = presented_token(headers)
        if presented is None:
            raise _RefusedError(
                HTTPStatus.UNAUTHORIZED,
                f"missing token: send Authorization: Bearer … or {TOKEN_HEADER}",
            )
        if not hmac.compare_digest(presented.encode(), self.token.encode()):
            raise _RefusedError(HTTPStatus.FORBIDDEN, "wrong token")
        if job not in self.jobs:
            raise _RefusedError(
                HTTPStatus.NOT_FOUND, "unknown job (it must be configured under jobs)"
            )
        return job, event

    def handle(
        self, path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> PingResponse:
        try:
            job, event = self._addressed(path, query, headers)
            data = _parse_body(body)
        except _RefusedError as refused:
            return _error(refused.status, refused.message)
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
                    pid=data.get("pid"),
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
