"""Reading target sources: Prometheus' file_sd files and http_sd endpoints.

Both speak one format, a list of ``{"targets": ["host:port", ...], "labels":
{...}}`` (https://prometheus.io/docs/prometheus/latest/http_sd/; a file may
also be YAML). A file is read again only when its mtime, size or inode
changes; an endpoint is asked each refresh, under a total deadline
(:mod:`lockwatch.util.deadline`), its answer read in chunks and given up
past ``_MAX_BODY`` (an endless answer costs a chunk of memory, not the host's).
Every failure, a malformed answer too (JSON nested too deep for the parser,
YAML that is not a document), is a :class:`SampleError` that names the
source, never its URL (it may carry credentials).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from lockwatch.model.discovery import TargetGroup
from lockwatch.sample.base import SampleError
from lockwatch.settings.sources import TargetSource
from lockwatch.text import one_line
from lockwatch.util.deadline import within

if TYPE_CHECKING:
    import requests

_MAX_BODY = 16 * 1024 * 1024  # an http_sd answer past this is refused
_CHUNK = 64 * 1024  # bytes read from an http_sd answer at a time
_YAML_SUFFIXES = (".yml", ".yaml")
# What parsing hostile text raises: nesting deeper than the parser's recursion
# limit is a RecursionError, not a ValueError.
_MALFORMED = (ValueError, RecursionError, yaml.YAMLError)


def parse_groups(document: object, what: str) -> tuple[TargetGroup, ...]:
    """The target groups of a file_sd/http_sd document; ``[]`` is a valid, empty list."""
    if not isinstance(document, list):
        raise SampleError(f"{what}: expected a list of target groups")
    groups = []
    for index, entry in enumerate(document):
        if not isinstance(entry, dict):
            raise SampleError(f"{what}: group {index}: expected a mapping")
        targets = entry.get("targets", [])
        labels = entry.get("labels") or {}
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise SampleError(f"{what}: group {index}: targets must be a list of strings")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise SampleError(f"{what}: group {index}: labels must map strings to strings")
        groups.append(TargetGroup(tuple(targets), tuple(sorted(labels.items()))))
    return tuple(groups)


class FileSd:
    """A file_sd file, parsed again only when it changed."""

    def __init__(self, source: TargetSource) -> None:
        assert source.file is not None
        self.path: Path = source.file
        self.what = f"target source {source.name}"
        self._seen: tuple[int, int, int] | None = None
        self._groups: tuple[TargetGroup, ...] = ()

    def read(self) -> tuple[TargetGroup, ...]:
        try:
            stat = os.stat(self.path)
            signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if signature == self._seen:
                return self._groups
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self._seen = None
            raise SampleError(
                f"{self.what}: cannot read {self.path}: {exc.__class__.__name__}"
            ) from None
        try:
            if self.path.suffix in _YAML_SUFFIXES:
                document = yaml.safe_load(text)
            else:
                document = json.loads(text)
        except _MALFORMED as exc:
            # a file caught half-written is read again at the next look
            self._seen = None
            reason = "nested too deep" if isinstance(exc, RecursionError) else one_line(exc)
            raise SampleError(f"{self.what}: {self.path} is not valid: {reason}") from None
        self._groups = parse_groups(document, self.what)
        self._seen = signature
        return self._groups

    def close(self) -> None:
        """Holds nothing open."""


class HttpSd:
    """An http_sd endpoint, asked at each refresh."""

    def __init__(self, source: TargetSource, session: requests.Session | None = None) -> None:
        assert source.url is not None
        self.url = source.url
        self.timeout = source.timeout
        self.what = f"target source {source.name}"
        from lockwatch.util.http_session import deadline_session  # requests: loaded here

        self._session = deadline_session() if session is None else session
        self._refresh = str(int(source.every))

    def read(self) -> tuple[TargetGroup, ...]:
        import requests

        headers = {
            "Accept": "application/json",
            "X-Prometheus-Refresh-Interval-Seconds": self._refresh,
        }
        with within(self.timeout) as deadline:
            try:
                response = self._session.get(
                    self.url, headers=headers, timeout=self.timeout, stream=True
                )
                with response:
                    body = self._bounded_body(response)
            except requests.RequestException as exc:
                if not deadline.expired:
                    raise SampleError(
                        f"{self.what}: request failed: {type(exc).__name__}"
                    ) from None
        if deadline.expired:
            raise SampleError(f"{self.what}: no whole answer within {self.timeout:g}s")
        if response.status_code != 200:
            raise SampleError(f"{self.what}: HTTP {response.status_code}")
        if body is None:
            raise SampleError(f"{self.what}: answer larger than {_MAX_BODY} bytes")
        try:
            document = json.loads(body)
        except RecursionError:
            raise SampleError(f"{self.what}: the answer is JSON nested too deep") from None
        except ValueError:
            raise SampleError(f"{self.what}: the answer is not JSON") from None
        return parse_groups(document, self.what)

    @staticmethod
    def _bounded_body(response: requests.Response) -> bytes | None:
        """The answer's body, or None once it passes ``_MAX_BODY`` (read no further)."""
        if response.status_code != 200:
            return b""
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > _MAX_BODY:
            return None
        body = bytearray()
        for chunk in response.iter_content(_CHUNK):
            body += chunk
            if len(body) > _MAX_BODY:
                return None
        return bytes(body)

    def close(self) -> None:
        self._session.close()


def open_source(source: TargetSource) -> FileSd | HttpSd:
    return FileSd(source) if source.file is not None else HttpSd(source)
