"""Rendezvous hashing: every key has one shard, the shards share the keys
evenly, and a shard added or removed moves only the keys it wins or held."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockwatch.settings.sharding import Shard, assignment, owner, parse_shard

KEYS = 3000


def keys_of(prefix: str) -> list[str]:
    return [f"{prefix}-{i}.db.internal:5432" for i in range(KEYS)]


def spread(count: int) -> float:
    """Five standard deviations of one shard's share under a uniform hash."""
    p = 1 / count
    return 5 * math.sqrt(KEYS * p * (1 - p))


@settings(max_examples=25, deadline=None)
@given(prefix=st.text(min_size=1, max_size=12), count=st.integers(2, 9))
def test_the_shards_share_the_keys_within_five_standard_deviations(prefix: str, count: int) -> None:
    shares = assignment(keys_of(prefix), count)

    assert sorted(k for keys in shares.values() for k in keys) == sorted(keys_of(prefix))
    for keys in shares.values():
        assert abs(len(keys) - KEYS / count) <= spread(count)


@settings(max_examples=25, deadline=None)
@given(prefix=st.text(min_size=1, max_size=12), count=st.integers(1, 8))
def test_a_new_shard_takes_about_one_in_n_plus_one_and_nothing_else_moves(
    prefix: str, count: int
) -> None:
    before = {key: owner(key, count) for key in keys_of(prefix)}
    after = {key: owner(key, count + 1) for key in keys_of(prefix)}
    moved = [key for key in before if before[key] != after[key]]

    # every key that moved went to the new shard: none moved between old ones
    assert {after[key] for key in moved} <= {count}
    assert abs(len(moved) - KEYS / (count + 1)) <= spread(count + 1)


@settings(max_examples=25, deadline=None)
@given(prefix=st.text(min_size=1, max_size=12), count=st.integers(2, 8))
def test_removing_the_last_shard_moves_only_its_own_keys(prefix: str, count: int) -> None:
    before = {key: owner(key, count) for key in keys_of(prefix)}
    after = {key: owner(key, count - 1) for key in keys_of(prefix)}

    assert {key for key in before if before[key] != after[key]} == {
        key for key in before if before[key] == count - 1
    }


def test_every_shard_of_a_split_agrees_on_who_owns_a_key() -> None:
    keys = keys_of("agree")
    owners = [[key for key in keys if Shard(i, 4).owns(key)] for i in range(4)]

    assert sum(len(keys) for keys in owners) == len(keys)
    assert len({key for part in owners for key in part}) == len(keys)


@pytest.mark.parametrize(
    ("text", "shard"),
    [("0/1", Shard(0, 1)), ("2/3", Shard(2, 3)), ("lockwatch-shard-11/12", Shard(11, 12))],
)
def test_a_shard_is_written_i_of_n_or_after_a_pod_name(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3/3", "the index goes from 0 to 2"),
        ("0/0", "at least 1"),
        ("lockwatch/3", "not i/n"),
        ("1", "not i/n"),
    ],
)
def test_a_wrong_shard_says_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shard(text)
