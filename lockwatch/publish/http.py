"""The HTTP endpoint: /metrics, the JSON API, the status page and /healthz.

Every response is rendered from the board; no request reaches a database.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lockwatch.publish.api.encode import json_safe, render_json
from lockwatch.publish.api.findings import findings_document
from lockwatch.publish.api.incidents import (
    IncidentQuery,
    QueryError,
    incident_document,
    incidents_document,
)
from lockwatch.publish.api.jobs import jobs_document
from lockwatch.publish.api.locks import Page, locks_document
from lockwatch.publish.api.queues import queues_document
from lockwatch.publish.api.sd import sd_document
from lockwatch.publish.auth import BasicAuth
from lockwatch.publish.bodies import BodyRefusedError, read_body
from lockwatch.publish.encoding import encoded
from lockwatch.publish.metrics.registry import Metrics
from lockwatch.publish.pings import MAX_BODY as MAX_PING_BODY
from lockwatch.publish.pings import PingReceiver
from lockwatch.publish.renders import Answer, Renders
from lockwatch.publish.runbooks import runbooks_page
from lockwatch.publish.status.page import StatusPage
from lockwatch.settings.targets import parse_listen
from lockwatch.settings.web import WebConfig
from lockwatch.state.board import Board
from lockwatch.state.deliveries import Deliveries
from lockwatch.state.incident_history import IncidentHistory
from lockwatch.text import printable
from lockwatch.util.clock import utc_now

logger = logging.getLogger(__name__)

_QUERY = re.compile(r"\?\S*")
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"
# The status page needs nothing but its own inline styles: should a value from
# the database ever slip through unescaped, the browser still runs nothing.
PAGE_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)

BUSY = Answer(HTTPStatus.SERVICE_UNAVAILABLE, TEXT, b"busy, try again\n", (("Retry-After", "1"),))
# /api/v1/locks: keys per target and page unless ?limit= says otherwise, and at most.
LOCKS_LIMIT = 100
MAX_LOCKS_LIMIT = 1000

# Seconds between the serving loop's looks at stop(): each look wakes the
# thread (at 0.1 s, 10 wake-ups a second cost an idle daemon as much CPU as
# polling 100 locks every second).
SERVE_POLL = 0.5

# Seconds a connection may sit idle before its thread gives up on it.
REQUEST_TIMEOUT = 10.0
# Seconds a whole request may take to arrive and be answered: per-read
# timeouts alone let a client that sends a byte every few seconds keep its
# thread for ever.
REQUEST_DEADLINE = 30.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A burst of connections (slow clients, say) must not fill the backlog
    # and leave Prometheus's connect waiting for a SYN retry.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        app: HttpServer,
        tls: ssl.SSLContext | None = None,
    ):
        # The base class creates its socket from this attribute in __init__.
        self.address_family = family
        self.app = app
        self.tls = tls
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            # [::] (what :PORT means) takes IPv4 too, as exporters written in Go do.
            with contextlib.suppress(OSError):
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        # The handshake happens here, in the connection's own thread and under
        # its timeout: in accept() a client that never says hello would stall
        # every other connection.
        request.settimeout(REQUEST_TIMEOUT)
        try:
            secured = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            logger.debug("TLS handshake with %s failed: %s", client_address[0], exc)
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            self.shutdown_request(secured)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT
    server_version = "lockwatch"

    def version_string(self) -> str:
        # Without Python's version: a scanner learns nothing from the header.
        return self.server_version

    def handle_one_request(self) -> None:
        deadline = threading.Timer(self.server.app.request_deadline, self._cut_off)
        deadline.daemon = True
        deadline.start()
        try:
            super().handle_one_request()
        finally:
            deadline.cancel()

    def _cut_off(self) -> None:
        """Past the deadline: the blocked read wakes with an error, the thread ends."""
        logger.debug("%s took too long to send a request; cut off", self.address_string())
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        pings = (
            self.command == "POST"
            and self.path.startswith("/ping/")
            and self.server.app.pings is not None
        )
        if self.command not in ("GET", "HEAD") and not pings:
            # Refused before dispatch, so every method, known to http.server or not, gets 405.
            self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
            self.send_header("Allow", "POST" if self.path.startswith("/ping/") else "GET, HEAD")
            self.send_header("Content-Type", TEXT)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False
        return True

    def do_GET(self) -> None:
        if not self.server.app.authorized(self):
            return
        try:
            self.server.app.route(self)
        except ConnectionError:
            logger.debug(
                "%s went away before the answer to %s", self.address_string(), printable(self.path)
            )
        except Exception:
            logger.exception("failed to answer %s", printable(self.path))
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR)

    def do_HEAD(self) -> None:
        # What GET would answer, headers only: reply() leaves the body out.
        self.do_GET()

    def do_POST(self) -> None:
        receiver = self.server.app.pings
        assert receiver is not None  # parse_request lets POST through only then
        try:
            # An oversized body is refused before it is read, never buffered.
            payload = read_body(self.headers, self.rfile, MAX_PING_BODY)
        except BodyRefusedError as exc:
            self.close_connection = True
            self.reply(exc.status, JSON, render_json({"ok": False, "error": exc.reason}))
            return
        except (ConnectionError, TimeoutError):
            logger.debug("%s went away during a ping", self.address_string())
            return
        try:
            url = urlsplit(self.path)
            answer = receiver.handle(url.path, url.query, dict(self.headers.items()), payload)
            self.reply(answer.status, JSON, render_json(answer.body))
        except (ConnectionError, TimeoutError):
            logger.debug("%s went away during a ping", self.address_string())

    def reply(
        self,
        status: HTTPStatus,
        content_type: str,
        body: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Query strings are cut: a client may put a token there despite the docs.
        logger.debug("%s %s", self.address_string(), printable(_QUERY.sub("?…", format % args)))


class HttpServer:
    """Serves the board over HTTP from a daemon thread."""

    def __init__(
        self,
        board: Board,
        metrics: Metrics,
        listen: str,
        stale_after: float,
        clock: Callable[[], datetime] = utc_now,
        web: WebConfig | None = None,
        request_deadline: float = REQUEST_DEADLINE,
        *,
        also_listen: tuple[str, ...] = (),
        telemetry_path: str = "/metrics",
    ) -> None:
        self._board = board
        self.request_deadline = request_deadline
        self._metrics = metrics
        # The first address is settings.listen; more come from --web.listen-address.
        self._listens = (listen, *also_listen)
        for address in self._listens:
            parse_listen(address)
        self.telemetry_path = telemetry_path
        self.stale_after = stale_after
        self._clock = clock
        self._status_page = StatusPage(board, clock)
        self.renders = Renders(board)
        # Everything rendered from the board alone, once per poll (renders.py).
        self._documents: dict[str, Callable[[Page | None], Answer]] = {
            "/api/v1/findings": lambda _: self._json(lambda: findings_document(board)),
            "/api/v1/locks": lambda page: self._json(
                lambda: locks_document(board, clock(), page=page)
            ),
            "/api/v1/queues": lambda _: self._json(lambda: queues_document(board)),
            "/api/v1/jobs": lambda _: self._json(lambda: jobs_document(board)),
            # the runbooks every runbook link points at (publish/runbooks.py)
            "/runbooks": lambda _: Answer(
                HTTPStatus.OK, HTML, runbooks_page(), (("Content-Security-Policy", PAGE_POLICY),)
            ),
        }
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self._started: float = 0.0
        self.pings: PingReceiver | None = None  # POST /ping/... when jobs are pinged
        self.incidents: IncidentHistory | None = None  # resolved incidents past the board's
        self._web = web
        self._auth = BasicAuth(web.users) if web is not None and web.users else None

    @property
    def deliveries(self) -> Deliveries | None:
        """What the notifier told: joined to the incidents the page and the API show."""
        return self._status_page.deliveries

    @deliveries.setter
    def deliveries(self, deliveries: Deliveries | None) -> None:
        self._status_page.deliveries = deliveries

    @property
    def address(self) -> tuple[str, int]:
        """The first bound host and port (the real port when asked for port 0)."""
        return self.addresses[0]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every bound host and port, in the order they were given."""
        if not self._servers:
            raise RuntimeError("the HTTP server is not started")
        return [(str(s.server_address[0]), int(s.server_address[1])) for s in self._servers]

    def _bind(self, listen: str, tls: ssl.SSLContext | None) -> _Server:
        host, port = parse_listen(listen)
        try:
            family = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]
            return _Server((host, port), family, self, tls)
        except OSError as error:
            if host == "::" and error.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                # No IPv6 on this machine: every interface is every IPv4 one.
                return self._bind(f"0.0.0.0:{port}", tls)
            raise OSError(
                error.errno, f"cannot listen on {listen}: {error.strerror or error}"
            ) from error

    def start(self) -> None:
        tls = self._web.ssl_context() if self._web is not None and self._web.tls else None
        try:
            for listen in self._listens:
                self._servers.append(self._bind(listen, tls))
        except OSError:
            self.stop()
            raise
        self._started = self._board.monotonic()
        scheme = "https" if tls is not None else "http"
        for server, (host, port) in zip(self._servers, self.addresses, strict=True):
            thread = threading.Thread(
                target=server.serve_forever,
                # How often the serving loop checks for stop(): bounds how long
                # stop() takes, and is how often an idle daemon wakes up for it.
                kwargs={"poll_interval": SERVE_POLL},
                name="lockwatch-http",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
            shown = f"[{host}]" if ":" in host else host
            logger.info("serving metrics and API on %s://%s:%d/", scheme, shown, port)

    def stop(self) -> None:
        for index, server in enumerate(self._servers):
            if index < len(self._threads):  # shutdown() waits for serve_forever to end
                server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join()
        self._servers = []
        self._threads = []

    def authorized(self, request: _Handler) -> bool:
        """True when no basic auth is configured or the request passes it;
        otherwise answers 401. Every GET path is protected, /healthz too, as
        exporters do; pings carry their own token."""
        if self._auth is None:
            return True
        accepted, user = self._auth.check(request.headers.get("Authorization"))
        if accepted:
            return True
        logger.warning(
            "refused %s from %s: %s",
            printable(_QUERY.sub("?…", urlsplit(request.path).path))[:200],
            request.address_string(),
            f"wrong password for user {printable(user)[:64]!r}" if user else "no credentials",
        )
        request.reply(
            HTTPStatus.UNAUTHORIZED,
            TEXT,
            b"unauthorized\n",
            {"WWW-Authenticate": 'Basic realm="lockwatch", charset="UTF-8"'},
        )
        return False

    def route(self, request: _Handler) -> None:
        url = urlsplit(request.path)
        path = url.path
        if path == "/healthz":
            status, reason = self.health()
            request.reply(status, TEXT, (reason + "\n").encode("utf-8"))
            return
        # Answered in turn, written after: a client slow to read its answer
        # must not hold up the next one.
        with self.renders.turn(urgent=path == self.telemetry_path) as turn:
            answer = self._answer(request, url.path, url.query) if turn else BUSY
        if path == self.telemetry_path and answer.status is HTTPStatus.OK:  # as exporters do
            answer = encoded(answer, request.headers.get("Accept-Encoding", ""))
        request.reply(answer.status, answer.content_type, answer.body, dict(answer.headers))

    def _answer(self, request: _Handler, path: str, query: str) -> Answer:
        if path in (self.telemetry_path, "/api/v1/sd"):
            return self._live(request, path, query)
        if path == "/api/v1/incidents" or path.startswith("/api/v1/incidents/"):
            return self._incidents(path, query)
        if path == "/":
            refresh = "off" not in parse_qs(query).get("refresh", [])
            return self.renders.answer((path, refresh), lambda: self._page(refresh))
        if path not in self._documents:
            return Answer(HTTPStatus.NOT_FOUND, TEXT, b"not found\n")
        try:
            page = _locks_page(query) if path == "/api/v1/locks" else None
        except ValueError as exc:
            return Answer(HTTPStatus.BAD_REQUEST, JSON, render_json({"error": str(exc)}))
        render = self._documents[path]
        return self.renders.answer((path, page), lambda: render(page))

    def _live(self, request: _Handler, path: str, query: str) -> Answer:
        """What is answered afresh each time: the metrics (process_* and the
        notifier's counters move between polls) and /api/v1/sd (the address
        it names is the one this client reached)."""
        if path == "/api/v1/sd":
            groups = sd_document(self._board, self._own_address(request), self.telemetry_path)
            return Answer(HTTPStatus.OK, JSON, render_json(groups))
        # With ?target= (a probe from /api/v1/sd) that target's series only;
        # ?detail=full: every series of every target, quiet or not.
        params = parse_qs(query)
        only = params.get("target")
        detail = params.get("detail", [])
        if any(value != "full" for value in detail):
            return Answer(HTTPStatus.BAD_REQUEST, TEXT, b"detail takes one value: full\n")
        body, content_type = self._metrics.render(
            request.headers.get("Accept", ""), only[0] if only else None, detail=bool(detail)
        )
        return Answer(HTTPStatus.OK, content_type, body)

    def _json(self, document: Callable[[], Mapping[str, Any]]) -> Answer:
        return Answer(HTTPStatus.OK, JSON, render_json(document()))

    def _page(self, refresh: bool) -> Answer:
        page = self._status_page.render(refresh=refresh).encode("utf-8")
        return Answer(HTTPStatus.OK, HTML, page, (("Content-Security-Policy", PAGE_POLICY),))

    def _own_address(self, request: _Handler) -> str:
        """host:port as the client reached lockwatch (its Host header), else the bound one."""
        host = request.headers.get("Host", "")
        try:
            parse_listen(host)
        except ValueError:
            bound, port = self.address
            return f"[{bound}]:{port}" if ":" in bound else f"{bound}:{port}"
        return host

    def _incidents(self, path: str, query: str) -> Answer:
        """The incidents, filtered and paged, or one of them by id (not kept:
        each answer is bounded by its page, and the history is read as asked)."""
        ident = path.removeprefix("/api/v1/incidents").strip("/")
        if ident:
            found = incident_document(self._board, self.incidents, unquote(ident), self.deliveries)
            if found is None:
                return Answer(
                    HTTPStatus.NOT_FOUND, JSON, render_json({"error": "no such incident"})
                )
            return Answer(HTTPStatus.OK, JSON, render_json(found))
        try:
            asked = IncidentQuery.parse(parse_qs(query), self._clock())
        except QueryError as exc:
            return Answer(HTTPStatus.BAD_REQUEST, JSON, render_json(json_safe({"error": str(exc)})))
        return self._json(
            lambda: incidents_document(self._board, self.incidents, asked, self.deliveries)
        )

    def health(self) -> tuple[HTTPStatus, str]:
        """OK while the poll loop makes progress; 503 with the reason once it stalls.
        With no target at all (a shard whose sources list none for it) nothing
        can stall: OK."""
        if not self._board.views():
            return HTTPStatus.OK, "ok: no targets to watch"
        since_progress = self._board.seconds_since_progress()
        if since_progress is None:
            waited = self._board.monotonic() - self._started
            if waited <= self.stale_after:
                return HTTPStatus.OK, "ok"
            return (
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"no poll finished in the {waited:.0f} s since start "
                f"(limit {self.stale_after:g} s)",
            )
        if since_progress <= self.stale_after:
            return HTTPStatus.OK, "ok"
        return (
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"poll loop stalled: last poll finished {since_progress:.0f} s ago "
            f"(limit {self.stale_after:g} s)",
        )


def _locks_page(query: str) -> Page:
    """``?limit=&offset=&target=`` of /api/v1/locks; ValueError says what is wrong."""
    values = parse_qs(query, keep_blank_values=True)
    numbers = {}
    for name, default in (("limit", LOCKS_LIMIT), ("offset", 0)):
        given = values.get(name, [str(default)])[-1]
        if not given.isdigit() or len(given) > 9:
            raise ValueError(f"{name} must be a whole number, not {printable(given)[:20]!r}")
        numbers[name] = int(given)
    if not 1 <= numbers["limit"] <= MAX_LOCKS_LIMIT:
        raise ValueError(f"limit must be from 1 to {MAX_LOCKS_LIMIT}")
    target = values.get("target", [None])[-1]
    return Page(numbers["limit"], numbers["offset"], target)
