"""A loopback HTTP receiver that trickles its answer: it reads the request,
then sends a valid, long answer one byte per ``pause``, so that no single read
of the client's ever waits long and only a total deadline ends the call."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from types import TracebackType

ANSWER_BODY = b'{"ok": true, "result": {"message_id": 1}}' + b" " * 4000


@dataclass
class Call:
    """One connection: what the client sent, how much of the answer it took."""

    request: bytes = b""
    sent: int = 0  # bytes of the answer sent before the client went away
    closed_by_client: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class Trickler:
    def __init__(self, pause: float = 0.2) -> None:
        self.pause = pause
        self.answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(ANSWER_BODY)).encode() + b"\r\n\r\n" + ANSWER_BODY
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.calls: list[Call] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="trickler", daemon=True)
        self._thread.start()

    @property
    def whole_answer_seconds(self) -> float:
        """How long sending one whole answer takes."""
        return len(self.answer) * self.pause

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            call = Call()
            self.calls.append(call)
            threading.Thread(target=self._serve, args=(conn, call), daemon=True).start()

    def _serve(self, conn: socket.socket, call: Call) -> None:
        with conn:
            call.request = _read_request(conn)
            for byte in self.answer:
                if self._stop.wait(self.pause):
                    break
                try:
                    conn.sendall(bytes((byte,)))
                except OSError:
                    call.closed_by_client = True
                    break
                call.sent += 1
                if _peer_gone(conn):
                    call.closed_by_client = True
                    break
        call.ended.set()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def __enter__(self) -> Trickler:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _read_request(conn: socket.socket) -> bytes:
    """The request's head and its Content-Length of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _peer_gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (a FIN waits to be read)."""
    conn.setblocking(False)
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        conn.setblocking(True)
