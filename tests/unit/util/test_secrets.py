"""Redaction by a DSN's structure, never by a password's text."""

from __future__ import annotations

import urllib.parse

from hypothesis import given
from hypothesis import strategies as st

from lockwatch.settings.fields import check_dsn
from lockwatch.util.secrets import describe_dsn, dsn_secrets, misread_authority, redact

PASSWORDS = st.text(
    alphabet=st.characters(codec="ascii", exclude_characters="\0 /?#", min_codepoint=33),
    min_size=1,
)


def test_an_unencoded_at_in_a_uri_password_is_refused_without_quoting_the_dsn() -> None:
    problem = check_dsn("postgresql://u:Wr@ngPW@127.0.0.1/db")
    assert problem is not None and "percent-encode the password" in problem
    assert "ngPW" not in problem and "Wr" not in problem
    assert check_dsn("postgresql://u:Wr%40ngPW@127.0.0.1/db") is None
    assert check_dsn("host=127.0.0.1 user=u password=Wr@ngPW dbname=db") is None


def test_a_misread_dsn_is_described_without_its_password_tail() -> None:
    assert "ngPW" not in describe_dsn("postgresql://u:Wr@ngPW@127.0.0.1/db")


@given(PASSWORDS)
def test_a_uri_password_is_blanked_whatever_it_holds(password: str) -> None:
    raw = f"could not connect to postgresql://u:{password}@db.example/x, giving up"
    shown = redact(raw)
    assert shown == "could not connect to postgresql://u:***@db.example/x, giving up"
    encoded = f"postgresql://u:{urllib.parse.quote(password, safe='')}@db.example/x"
    assert not misread_authority(encoded)


@given(st.sampled_from(["1", "a", "main", "127", "lock", "target"]))
def test_a_short_password_garbles_no_message(password: str) -> None:
    dsn = f"host=127.0.0.1 port=5432 dbname=main user=lockwatch password={password}"
    message = f"target main cannot be sampled: {describe_dsn(dsn)}: lock timeout 1s"
    assert redact(message, dsn_secrets(dsn)) == message
    assert redact(f"bad DSN {dsn}", dsn_secrets(dsn)) == "bad DSN ***"
