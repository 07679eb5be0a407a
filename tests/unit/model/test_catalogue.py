"""The catalogue of well-known lock keys: each entry's key from its library's
published formula, and what naming a key changes for the detectors."""

from __future__ import annotations

import doctest
import hashlib
import zlib
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.config.load import ConfigError, load_settings
from lockwatch.detect.locks import detect_locks
from lockwatch.model import catalogue
from lockwatch.model.catalogue import (
    flyway,
    golang_migrate,
    goose,
    pg_boss,
    prisma,
    rails,
    registry,
    sqlx,
)
from lockwatch.model.evidence import LockEvidence
from lockwatch.model.findings import FindingKind, Subject
from lockwatch.model.locks import AdvisoryLock, LockKey
from lockwatch.settings.locks import LockSettings, NamedLock
from tests.fixtures.evidence import evidence_as
from tests.fixtures.snapshots import NOW, backend, held, snapshot, waiting


@pytest.mark.parametrize("module", [catalogue, flyway, golang_migrate, pg_boss, prisma, rails])
def test_the_doctests_hold(module: ModuleType) -> None:
    assert doctest.testmod(module).failed == 0


def test_the_issue_s_bare_numbers_are_prisma_and_pg_boss_on_db_app() -> None:
    # Both numbers as a user saw them unnamed in lockwatch (issue 14).
    prisma_lock = registry.identify("app", LockKey.parse("72707369"))
    assert prisma_lock is not None and prisma_lock.name == "Prisma Migrate"
    pg_boss_key = LockKey.parse("-9218828629118414586")
    pg_boss_lock = registry.identify("app", pg_boss_key)
    assert pg_boss_lock is not None and pg_boss_lock.name == "pg-boss maintenance"
    assert registry.identify("other", pg_boss_key) is None  # the key depends on the database


def test_rails_keys_are_the_salt_times_the_crc32_of_the_database() -> None:
    for database in ("app", "app_production", "données"):
        expected = 2053462845 * zlib.crc32(database.encode())
        assert rails.migrator_key(database) == LockKey.bigint(expected)
        assert -(1 << 63) <= expected < 1 << 63
    known = registry.identify(
        "app_production", LockKey.bigint(2053462845 * zlib.crc32(b"app_production"))
    )
    assert known is not None and known.name == "Rails migrations on db app_production"


def test_golang_migrate_hashes_database_schema_and_table_with_nul_separators() -> None:
    checksum = zlib.crc32(b"app\x00public\x00schema_migrations")
    assert golang_migrate.migrate_key("app") == LockKey.bigint(checksum * 1486364155 % (1 << 32))
    assert golang_migrate.migrate_key("app", "tenant") != golang_migrate.migrate_key("app")


def test_pg_boss_takes_the_first_eight_bytes_of_sha224_as_a_signed_bigint() -> None:
    digest = hashlib.sha224(b"app.pgboss.pgboss").hexdigest()
    assert pg_boss.maintenance_key("app") == LockKey.bigint(
        int.from_bytes(bytes.fromhex(digest[:16]), "big", signed=True)
    )


def test_flyway_adds_the_java_hash_of_the_quoted_table_to_its_magic_number() -> None:
    assert flyway.LOCK_MAGIC_NUM == 0x466C79776179  # "Flyway"
    assert flyway.KEY.first - flyway.LOCK_MAGIC_NUM == flyway.java_hash(
        '"public"."flyway_schema_history"'
    )


def crc64_xz(data: bytes) -> int:
    """Go's crc64.Checksum with the ECMA table: reflected, all ones in and out."""
    crc = (1 << 64) - 1
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xC96C5795D7870F42 if crc & 1 else 0)
    return crc ^ ((1 << 64) - 1)


def test_goose_s_key_is_the_crc64_of_its_name() -> None:
    assert LockKey.bigint(crc64_xz(b"goose")) == goose.KEY


def test_sqlx_multiplies_the_crc32_of_the_database_by_its_factor() -> None:
    for database in ("app", "a-much-longer-database-name"):
        expected = 0x3D32AD9E * zlib.crc32(database.encode())
        assert sqlx.migrate_key(database) == LockKey.bigint(expected)
        assert expected < 1 << 63


def test_no_two_entries_share_a_key_in_the_same_database() -> None:
    for database in ("app", "postgres", "prod"):
        keys = [key for entry in registry.ENTRIES for key in entry.keys(database)]
        assert len(keys) == len(set(keys))


PRISMA = 72707369


def prisma_convoy() -> list[AdvisoryLock]:
    return [
        held(PRISMA, 1234, held_for=20),
        waiting(PRISMA, 2000, waited_for=15),
        waiting(PRISMA, 2001, waited_for=10),
    ]


def test_a_migration_convoy_on_the_prisma_key_is_named_prisma_migrate() -> None:
    snap = snapshot(
        *prisma_convoy(),
        backends=[backend(1234, "deploy-1"), backend(2000, "deploy-2"), backend(2001, "deploy-3")],
    )
    [finding] = detect_locks(snap, LockSettings(), NOW)
    assert finding.kind is FindingKind.LOCK_CONVOY
    assert finding.subject == Subject("app", "Prisma Migrate")
    assert "lock Prisma Migrate (72707369)" in finding.summary
    assert evidence_as(finding, LockEvidence).name == "Prisma Migrate"


def test_the_catalogue_can_be_turned_off_or_skip_a_library_and_named_locks_win() -> None:
    snap = snapshot(*prisma_convoy())
    # Unnamed, the key's convoy is about its holder (a session not seen: its pid).
    unnamed = detect_locks(snap, LockSettings(catalogue=False), NOW)[0]
    assert (unnamed.subject.lock, evidence_as(unnamed, LockEvidence).key) == (
        "pid 1234",
        "72707369",
    )
    skipped = detect_locks(snap, LockSettings(catalogue_skip=("prisma",)), NOW)[0]
    assert (skipped.subject.lock, evidence_as(skipped, LockEvidence).key) == (
        "pid 1234",
        "72707369",
    )
    ours = LockSettings(named=(NamedLock("deploy-gate", LockKey.bigint(PRISMA)),))
    assert detect_locks(snap, ours, NOW)[0].subject.lock == "deploy-gate"


def test_an_ignored_key_stays_ignored_though_the_catalogue_knows_it() -> None:
    snap = snapshot(*prisma_convoy())
    assert detect_locks(snap, LockSettings(ignore=(LockKey.bigint(PRISMA),)), NOW) == []


def test_defaults_turn_the_catalogue_off_and_a_target_skips_one_library(tmp_path: Path) -> None:
    path = tmp_path / "lockwatch.yml"
    path.write_text(
        "defaults:\n  locks:\n    catalogue: false\n"
        "targets:\n"
        "  - name: quiet\n    dsn: postgresql://mon@127.0.0.1/app\n"
        "  - name: rails-free\n    dsn: postgresql://mon@127.0.0.1/app\n"
        "    locks:\n      catalogue: true\n      catalogue_skip: [rails]\n",
        encoding="utf-8",
    )
    quiet, rails_free = load_settings(path, {}).targets
    rails_key = rails.migrator_key("app")
    assert quiet.locks.named_lock("app", LockKey.bigint(PRISMA)) is None
    assert rails_free.locks.named_lock("app", rails_key) is None
    prisma_lock = rails_free.locks.named_lock("app", LockKey.bigint(PRISMA))
    assert prisma_lock is not None and prisma_lock.name == "Prisma Migrate"


def test_an_unknown_library_to_skip_is_a_config_problem_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "lockwatch.yml"
    path.write_text(
        "targets:\n  - name: main\n    dsn: postgresql://mon@127.0.0.1/app\n"
        "    locks:\n      catalogue_skip: [prizma]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    [problem] = caught.value.problems
    assert "not a catalogued library: 'prizma'" in str(problem)
    assert ":5:" in str(problem)


@given(st.text(min_size=1, max_size=63))
def test_every_entry_s_key_in_any_database_is_named_by_the_catalogue(database: str) -> None:
    for entry in registry.ENTRIES:
        for key in entry.keys(database):
            known = registry.identify(database, key)
            assert known is not None
            # A key two entries share in a database keeps the first entry's name.
            first = next(e for e in registry.ENTRIES if key in e.keys(database))
            assert known.library == first.library
