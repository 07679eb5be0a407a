"""check-config's look at the queue libraries a config's presets read: the
schema version each target has installed, against the versions lockwatch
knows (a release that changed its tables fails every poll otherwise)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import psycopg

from lockwatch.sample.base import SampleError
from lockwatch.sample.queues import schema_query
from lockwatch.settings.queues import LibrarySchema, SqlQueueSource
from lockwatch.settings.targets import Target
from lockwatch.util.secrets import dsn_secrets, first_line, redact

CONNECT_TIMEOUT = 3  # seconds: a note, not the daemon's wait


@dataclass(frozen=True, slots=True)
class VersionNote:
    """What check-config says of one target's library: a warning (a version
    newer than lockwatch knows, or unread), or a problem (one it cannot read)."""

    text: str
    problem: bool = False


def _schemas(target: Target) -> Iterator[tuple[str, LibrarySchema]]:
    """Each library a target's queues read by its schema version, once."""
    seen: set[str] = set()
    for queue in target.queues:
        source = queue.source
        if not isinstance(source, SqlQueueSource) or source.schema is None:
            continue
        if source.schema.library not in seen:
            seen.add(source.schema.library)
            yield queue.name, source.schema


def _installed(conn: psycopg.Connection[Any], schema: LibrarySchema) -> int | None:
    row = conn.execute(schema.version_query).fetchone()
    version = row[0] if row else None
    return version if isinstance(version, int) else None


def version_notes(targets: tuple[Target, ...]) -> list[VersionNote]:
    """For every target whose queues read a library by its schema version,
    what its installed version means to lockwatch; nothing for a known one."""
    notes: list[VersionNote] = []
    for target in targets:
        schemas = list(_schemas(target))
        if not schemas:
            continue
        try:
            with psycopg.connect(
                target.dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT,
                prepare_threshold=None,
                application_name="lockwatch-check-config",
                options="-c default_transaction_read_only=on -c statement_timeout=5000",
            ) as conn:
                notes.extend(_judged(target, conn, schemas))
        except psycopg.Error as exc:
            reason = redact(first_line(exc), dsn_secrets(target.dsn))
            notes.append(VersionNote(f"target {target.name}: library versions not read: {reason}"))
    return notes


def _judged(
    target: Target, conn: psycopg.Connection[Any], schemas: list[tuple[str, LibrarySchema]]
) -> Iterator[VersionNote]:
    for queue, schema in schemas:
        where = f"target {target.name}, queue {queue}"
        try:
            version = _installed(conn, schema)
        except psycopg.Error as exc:
            yield VersionNote(
                f"{where}: {schema.library} schema version not read: {first_line(exc)}"
            )
            continue
        if version is None:
            yield VersionNote(f"{where}: no {schema.library} schema version found", problem=True)
            continue
        try:
            _, note = schema_query(schema, version)
        except SampleError as exc:
            yield VersionNote(f"{where}: {exc}", problem=True)
            continue
        if note is not None:
            yield VersionNote(f"{where}: {note}")


def check_library_versions(config_file: Path, targets: tuple[Target, ...]) -> None:
    """check-config's lines for the libraries' versions: a warning for a newer
    one (read as the latest known), a problem, exit 1, for one it cannot read
    (the config itself is fine)."""
    notes = version_notes(targets)
    for note in notes:
        word = "problem" if note.problem else "warning"
        click.echo(f"{config_file}: {word}: {note.text}", err=note.problem)
    if any(note.problem for note in notes):
        sys.exit(1)
