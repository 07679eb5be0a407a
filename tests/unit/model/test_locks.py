from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.locks import LockKey
from tests.fixtures.snapshots import lock_keys

int64 = st.integers(-(1 << 63), (1 << 63) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)


def pg_locks_columns(value: int) -> tuple[int, int]:
    """How PostgreSQL shows a bigint key: its high and low halves as unsigned oids."""
    unsigned = value & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


@given(int64)
def test_a_bigint_key_from_pg_locks_renders_as_the_application_wrote_it(value: int) -> None:
    classid, objid = pg_locks_columns(value)
    assert 0 <= classid < 1 << 32 and 0 <= objid < 1 << 32
    assert LockKey.from_pg_locks(classid, objid, 1).render() == str(value)


@given(int32, int32)
def test_a_pair_key_from_pg_locks_roundtrips(key1: int, key2: int) -> None:
    key = LockKey.from_pg_locks(key1 & 0xFFFFFFFF, key2 & 0xFFFFFFFF, 2)
    assert key == LockKey.int_pair(key1, key2)
    assert key.render() == f"{key1},{key2}"


@given(lock_keys)
def test_parsing_a_rendered_key_gives_the_same_key(key: LockKey) -> None:
    assert LockKey.parse(key.render()) == key


def test_a_pair_and_a_bigint_with_the_same_numbers_are_different_keys() -> None:
    assert LockKey.from_pg_locks(0, 42, 1) != LockKey.from_pg_locks(0, 42, 2)


@pytest.mark.parametrize("text", ["", "4x", "1,2,3", str(1 << 63), f"{1 << 31},0"])
def test_parse_refuses_what_is_not_a_key(text: str) -> None:
    with pytest.raises(ValueError, match="key"):
        LockKey.parse(text)
