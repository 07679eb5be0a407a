"""A loopback TCP relay to put between lockwatch and a server, to break the path
the ways networks break it.

``cut()`` keeps every socket open and drops the bytes, both ways, of the
connections it had and of those that arrive meanwhile: a firewall that starts
dropping packets, a peer that vanished without a FIN. ``refuse()`` closes
the listening socket and resets what was open: connection refused.
``mend()`` forwards again, on the same port; connections made while cut stay
black holes, as they would after a real outage.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from types import TracebackType

BUFFER = 65536


class Relay:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._selector = selectors.DefaultSelector()
        self._peers: dict[socket.socket, socket.socket | None] = {}
        self._clients: set[socket.socket] = set()
        # Ends whose other end closed while cut: their FIN gets through at mend().
        self._orphans: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._forwarding = True
        self._closed = False
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.dropped_bytes = 0
        # Wakes the loop when sockets are added or removed from another thread.
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    def _listen(self, port: int) -> socket.socket:
        listener = socket.create_server(("127.0.0.1", port))
        listener.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        return listener

    # -- control ---------------------------------------------------------------

    def cut(self) -> None:
        """Stop forwarding: every byte is read and dropped, no socket closes."""
        with self._lock:
            self._forwarding = False
        self._wake()

    def refuse(self) -> None:
        """Close the listening socket and reset every connection: connection refused."""
        with self._lock:
            self._forwarding = False
            if self._listener.fileno() != -1:
                self._selector.unregister(self._listener)
                self._listener.close()
            for sock in list(self._peers):
                self._drop(sock, reset=True)
        self._wake()

    def mend(self) -> None:
        """Forward again (listening again on the same port after ``refuse()``)."""
        with self._lock:
            if self._listener.fileno() == -1:
                self._listener = self._listen(self.port)
            for orphan in list(self._orphans):
                self._drop(orphan)
            self._forwarding = True
        self._wake()

    @property
    def connections(self) -> int:
        """Client connections open through the relay."""
        with self._lock:
            return len(self._clients)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._wake()
        self._thread.join(timeout=5)
        with self._lock:
            for sock in list(self._peers):
                self._drop(sock)
            if self._listener.fileno() != -1:
                self._selector.unregister(self._listener)
                self._listener.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the loop --------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run(self) -> None:
        while True:
            events = self._selector.select(timeout=0.5)
            with self._lock:
                if self._closed:
                    return
                for key, _ in events:
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._wake_r:
                        with contextlib.suppress(OSError):
                            sock.recv(BUFFER)
                    elif sock is self._listener:
                        self._accept()
                    elif sock in self._peers:
                        self._pump(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        upstream: socket.socket | None = None
        if self._forwarding:
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                return
            upstream.setblocking(True)
            self._peers[upstream] = client
            self._selector.register(upstream, selectors.EVENT_READ)
        # Blocking sends: loopback peers read fast, and a cut drops instead.
        client.setblocking(True)
        self._peers[client] = upstream
        self._clients.add(client)
        self._selector.register(client, selectors.EVENT_READ)

    def _pump(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(BUFFER)
        except OSError:
            data = b""
        if not data:
            if self._forwarding:
                self._drop(sock)
            else:
                self._close_one_side(sock)
            return
        peer = self._peers.get(sock)
        if not self._forwarding or peer is None:
            self.dropped_bytes += len(data)
            return
        try:
            peer.sendall(data)
        except OSError:
            self._drop(sock)

    def _close_one_side(self, sock: socket.socket) -> None:
        """A close while cut: the other end is not told until the path mends."""
        peer = self._peers.pop(sock, None)
        self._clients.discard(sock)
        self._selector.unregister(sock)
        sock.close()
        if peer is not None:
            self._peers[peer] = None
            self._orphans.add(peer)

    def _drop(self, sock: socket.socket, reset: bool = False) -> None:
        """Close a connection and its other end."""
        peer = self._peers.pop(sock, None)
        for one in (sock, peer):
            if one is None:
                continue
            self._peers.pop(one, None)
            self._clients.discard(one)
            self._orphans.discard(one)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(one)
            if reset:
                # SO_LINGER 0: close sends RST, as a host that refuses would.
                with contextlib.suppress(OSError):
                    one.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            one.close()
