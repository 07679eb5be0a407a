"""Local HTTP servers standing in for the Telegram Bot API, Slack incoming
webhooks and webhook receivers, for lockwatch's notifier and for Alertmanager.

One ``ChatStandin`` answers all three on 127.0.0.1 (a free port):

- ``POST /bot<token>/sendMessage`` as the Bot API does: a wrong token gets
  401, an unknown chat 400 "chat not found", HTML that Telegram's parser
  would refuse 400 "can't parse entities", text over 4,096 characters 400
  "message is too long". Give ``telegram_api`` to lockwatch or Alertmanager
  as ``api_url``.
- ``POST /services/...`` (``slack_url``) as a Slack incoming webhook.
- ``POST /hooks/...`` (``webhook_url``) as any webhook receiver.

``reply()`` queues one-shot answers (500, 429 with ``retry_after``, ...), for
one service or any;
``hang()`` makes every request wait, unanswered, until ``recover()``: the
receiver of seed 002 that accepts and never answers. ``delivered`` holds what
was answered with a success, in arrival order.
"""

from __future__ import annotations

import html
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TELEGRAM_LIMIT = 4096
_TAGS = frozenset(
    {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a"}
    | {"code", "pre", "blockquote", "tg-emoji"}
)
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+=\"[^\"<>]*\")*)\s*>")
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});")


def telegram_text(markup: str) -> str:
    """The text Telegram shows for a message in HTML parse mode, or ValueError
    for markup it refuses: a ``<``, ``>`` or ``&`` that is no tag or entity, an
    unsupported or unbalanced tag.

    >>> telegram_text("<b>a &lt;b&gt;</b> &amp; c")
    'a <b> & c'
    >>> telegram_text("a <b")
    Traceback (most recent call last):
    ...
    ValueError: can't parse entities: unexpected '<' at byte offset 2
    """
    text: list[str] = []
    open_tags: list[str] = []
    i = 0
    while i < len(markup):
        ch = markup[i]
        if ch == "<":
            tag = _TAG.match(markup, i)
            if tag is None:
                raise ValueError(f"can't parse entities: unexpected '<' at byte offset {i}")
            closing, name = tag.group(1), tag.group(2).lower()
            if name not in _TAGS:
                raise ValueError(f"can't parse entities: unsupported start tag {name!r}")
            if closing:
                if not open_tags or open_tags.pop() != name:
                    raise ValueError(f"can't parse entities: unmatched end tag {name!r}")
            else:
                open_tags.append(name)
            i = tag.end()
        elif ch == "&":
            entity = _ENTITY.match(markup, i)
            if entity is None:
                raise ValueError(f"can't parse entities: stray '&' at byte offset {i}")
            text.append(html.unescape(entity.group(0)))
            i = entity.end()
        elif ch == ">":
            raise ValueError(f"can't parse entities: unexpected '>' at byte offset {i}")
        else:
            text.append(ch)
            i += 1
    if open_tags:
        raise ValueError(f"can't parse entities: can't find end tag for {open_tags[-1]!r}")
    return "".join(text)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class Reply:
    """One answer; ``hang`` accepts the request and never answers it."""

    status: int = 200
    body: Any = None  # JSON-able, or bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass(frozen=True)
class Received:
    service: str  # telegram, slack or webhook
    path: str
    body: dict[str, Any]
    status: int | None  # None: never answered
    at: float  # time.monotonic()

    @property
    def text(self) -> str:
        """What a person reads: Telegram's rendered text, Slack's text, or the
        webhook's alert summaries and descriptions."""
        if self.service == "telegram":
            return telegram_text(str(self.body.get("text", "")))
        if self.service == "slack":
            parts = [str(self.body.get("text") or "")]
            for attachment in self.body.get("attachments") or []:
                parts += [str(attachment.get(k) or "") for k in ("title", "text")]
            return "\n".join(p for p in parts if p)
        alerts = self.body.get("alerts") or []
        return "\n".join(
            f"{a['annotations'].get('summary', '')}\n{a['annotations'].get('description', '')}"
            for a in alerts
        )


class ChatStandin:
    def __init__(self, token: str = "", chats: tuple[str, ...] = ("-1001234567890",)) -> None:
        self.token = token or f"{secrets.randbelow(10**9)}:{secrets.token_urlsafe(24)}"
        self.chats = set(chats)
        self.chat_id = chats[0]
        hook = secrets.token_urlsafe(16)
        self.received: list[Received] = []
        self._replies: dict[str | None, deque[Reply]] = {}
        self._hanging = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.standin = self  # type: ignore[attr-defined]
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.telegram_api = self.base
        self.slack_url = f"{self.base}/services/T0001/B0001/{hook}"
        self.webhook_url = f"{self.base}/hooks/{hook}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="chat-standin", daemon=True
        )
        self._thread.start()

    # -- control ---------------------------------------------------------------

    def reply(self, *replies: Reply, service: str | None = None) -> None:
        """Answer the next requests (to ``service``: telegram, slack or webhook;
        None: to any) with these, in order, then as usual again."""
        with self._lock:
            self._replies.setdefault(service, deque()).extend(replies)

    def hang(self) -> None:
        self._released.clear()
        self._hanging.set()

    def recover(self) -> None:
        self._hanging.clear()
        self._released.set()

    def close(self) -> None:
        self.recover()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatStandin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what arrived --------------------------------------------------------

    def delivered(self, service: str | None = None) -> list[Received]:
        with self._lock:
            return [
                r
                for r in self.received
                if r.status is not None
                and 200 <= r.status < 300
                and (service is None or r.service == service)
            ]

    def requests(self, service: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self.received if service is None or r.service == service]

    # -- answering -------------------------------------------------------------

    def _next_reply(self, service: str) -> Reply | None:
        with self._lock:
            for queue in (self._replies.get(service), self._replies.get(None)):
                if queue:
                    return queue.popleft()
        return None

    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, Reply]:
        service = self._service(path)
        scripted = self._next_reply(service)
        if self._hanging.is_set() or (scripted is not None and scripted.hang):
            return service, Reply(hang=True)
        if scripted is not None:
            return service, scripted
        if service == "telegram":
            return service, self._telegram(path, body)
        if service == "slack":
            ok = path == self.slack_url[len(self.base) :] and (
                body.get("text") or body.get("attachments")
            )
            if not ok:
                return service, Reply(404 if "text" in body else 400, b"no_service")
            return service, Reply(200, b"ok")
        if service == "webhook" and path == self.webhook_url[len(self.base) :]:
            return service, Reply(200, b"")
        return service, Reply(404, b"not found")

    def _service(self, path: str) -> str:
        if path.startswith("/bot"):
            return "telegram"
        if path.startswith("/services/"):
            return "slack"
        return "webhook"

    def _telegram(self, path: str, body: dict[str, Any]) -> Reply:
        token, _, method = path[len("/bot") :].partition("/")
        if token != self.token:
            return _telegram_error(401, "Unauthorized")
        if method == "getMe":
            return Reply(200, {"ok": True, "result": {"id": 1, "is_bot": True, "first_name": "t"}})
        if method != "sendMessage":
            return _telegram_error(404, "Not Found: method not found")
        chat = str(body.get("chat_id", ""))
        if chat not in self.chats:
            return _telegram_error(400, "Bad Request: chat not found")
        markup = str(body.get("text", ""))
        try:
            shown = telegram_text(markup) if body.get("parse_mode") == "HTML" else markup
        except ValueError as exc:
            return _telegram_error(400, f"Bad Request: {exc}")
        if not shown.strip():
            return _telegram_error(400, "Bad Request: message text is empty")
        if utf16_len(shown) > TELEGRAM_LIMIT:
            return _telegram_error(400, "Bad Request: message is too long")
        with self._lock:
            number = len(self.received) + 1
        result = {
            "message_id": number,
            "date": int(time.time()),
            "chat": {"id": int(chat) if chat.lstrip("-").isdigit() else 1, "type": "supergroup"},
            "text": shown,
        }
        return Reply(200, {"ok": True, "result": result})

    def record(self, service: str, path: str, body: dict[str, Any], status: int | None) -> None:
        with self._lock:
            self.received.append(Received(service, path, body, status, time.monotonic()))

    def wait_released(self, timeout: float = 120) -> None:
        self._released.wait(timeout)


def _telegram_error(status: int, description: str, **parameters: Any) -> Reply:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return Reply(status, body)


def telegram_flood(retry_after: int) -> Reply:
    """Telegram's 429, with the wait in the body as the Bot API gives it."""
    return _telegram_error(
        429, f"Too Many Requests: retry after {retry_after}", retry_after=retry_after
    )


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:
        standin: ChatStandin = self.server.standin  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"_raw": body}
        service, reply = standin.answer(self.path, body)
        if reply.hang:
            standin.record(service, self.path, body, None)
            standin.wait_released()
            self.close_connection = True
            return
        standin.record(service, self.path, body, reply.status)
        payload = reply.body
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(reply.status)
        content_type = "text/plain" if isinstance(payload, bytes) else "application/json"
        self.send_header("Content-Type", content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.do_POST()


def add_telegram(config: Path, standin: ChatStandin, api_url: str | None = None) -> None:
    """Append a notify section sending to ``standin``'s Telegram API (or to
    ``api_url``, e.g. a relay in front of it) to a lockwatch config file."""
    token = config.parent / "telegram-token"
    token.write_text(standin.token + "\n")
    with config.open("a") as extra:
        extra.write(
            f"""notify:
  connect_timeout: 1s
  read_timeout: 1s
  channels:
    - name: ops
      type: telegram
      bot_token_file: {token}
      chat_id: "{standin.chat_id}"
      api_url: {api_url or standin.telegram_api}
"""
        )
