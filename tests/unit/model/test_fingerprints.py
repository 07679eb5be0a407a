"""Query fingerprints: the statement, never the values it ran with."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.model.fingerprints import FINGERPRINT_CHARS, normalised_query, query_fingerprint

# Values a client may put in a statement: marked so that any part of one that
# survived would show.
secrets = st.text(alphabet="abcXYZ019 '\\$\"-*/;\n", min_size=0, max_size=20).map(
    lambda text: f"SeCrEt{text}"
)
numbers = st.one_of(
    st.integers(min_value=0, max_value=10**12).map(lambda n: f"{n}71"),
    st.floats(min_value=0, max_value=1e9, allow_nan=False).map(lambda f: f"{f!r}71"),
)


def string_literal(value: str, form: int) -> str:
    if form == 0:
        return "'" + value.replace("'", "''") + "'"
    if form == 1:
        return "E'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if form == 2:
        return f"$$ {value.replace('$', '')} $$"
    return f"$q${value.replace('$', '')}$q$"


@given(secrets, st.integers(0, 3), numbers)
def test_no_constant_of_a_statement_survives_in_its_fingerprint(
    value: str, form: int, number: str
) -> None:
    statement = (
        f"UPDATE jobs SET note = {string_literal(value, form)}, tries = {number} "
        f"WHERE id = $1 /* SeCrEt */ -- SeCrEt\n AND state = 'new'"
    )
    fingerprint = query_fingerprint(statement, None)
    assert fingerprint == "UPDATE jobs SET note = ?, tries = ? WHERE id = $1 AND state = ?"


@given(secrets)
def test_a_statement_cut_short_inside_a_constant_keeps_none_of_it(value: str) -> None:
    statement = "SELECT * FROM jobs WHERE note = '" + value.replace("'", "''")
    assert "SeCrEt" not in normalised_query(statement)


def test_a_server_query_id_is_the_fingerprint_and_a_long_text_is_bounded() -> None:
    assert query_fingerprint("SELECT 'SeCrEt'", 8812) == "query_id:8812"
    long = "SELECT " + ", ".join(f"column_{n}" for n in range(100)) + " FROM t"
    fingerprint = query_fingerprint(long, None)
    assert fingerprint is not None and len(fingerprint) == FINGERPRINT_CHARS
    assert query_fingerprint("  /* only a comment */ ", None) is None
