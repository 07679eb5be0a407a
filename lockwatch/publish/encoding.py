"""Compressing an answer for a client that accepts it, as exporters do for
/metrics: Prometheus asks with ``Accept-Encoding: gzip``, and a fleet's
/metrics (thousands of targets) shrinks about tenfold on the wire."""

from __future__ import annotations

import gzip
from dataclasses import replace

from lockwatch.publish.renders import Answer

MIN_SIZE = 1024  # bytes below which compressing saves nothing worth its header
LEVEL = 6  # zlib's default: most of the gain of 9 at a fraction of its time


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (RFC 9110 12.5.3).

    >>> accepts_gzip("gzip"), accepts_gzip("deflate, gzip;q=0.5"), accepts_gzip("*")
    (True, True, True)
    >>> accepts_gzip(""), accepts_gzip("gzip;q=0"), accepts_gzip("identity")
    (False, False, False)
    """
    for item in accept_encoding.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        weight = params.strip().lower()
        if weight.startswith("q="):
            try:
                return float(weight[2:]) > 0
            except ValueError:
                return False
        return True
    return False


def encoded(answer: Answer, accept_encoding: str) -> Answer:
    """The answer gzip-compressed when the client accepts it and it is worth it."""
    vary = (*answer.headers, ("Vary", "Accept-Encoding"))
    if len(answer.body) < MIN_SIZE or not accepts_gzip(accept_encoding):
        return replace(answer, headers=vary)
    body = gzip.compress(answer.body, compresslevel=LEVEL, mtime=0)
    return replace(answer, body=body, headers=(*vary, ("Content-Encoding", "gzip")))
