from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict

import bcrypt

# Successful logins remembered, so a scrape costs one bcrypt check, not one per request.
_CACHE_SIZE = 64
_DEFAULT_COST, _MIN_COST, _MAX_COST = 12, 4, 31  # bcrypt's


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against the bcrypt hashes.

    Time spent does not tell whether a user exists: an unknown name is checked
    against a hash of a random password made with the users' own cost (the
    highest, if they differ: bcrypt's time doubles with each step of cost, and
    a decoy of the default cost answered an unknown name 4 times sooner than
    a known one of cost 14), and names are compared in constant time. Only
    successful logins are remembered, as digests.
    """

    def __init__(self, users: tuple[tuple[str, str], ...]) -> None:
        self._users = [(name.encode(), hashed.encode()) for name, hashed in users]
        rounds = max((_cost(hashed) for _, hashed in self._users), default=_DEFAULT_COST)
        self._decoy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=rounds))
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


def _cost(hashed: bytes) -> int:
    """A bcrypt hash's cost (``$2b$12$...``); the default for one not of that form.

    >>> _cost(b"$2b$14$" + b"x" * 53), _cost(b"not a hash")
    (14, 12)
    """
    parts = hashed.split(b"$")
    if len(parts) > 3 and parts[2].isdigit() and _MIN_COST <= int(parts[2]) <= _MAX_COST:
        return int(parts[2])
    return _DEFAULT_COST


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
