"""The web-config file of Prometheus exporters: what lockwatch takes from it,
what it refuses, and how basic auth is checked."""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt
import pytest

from lockwatch.config.load import ConfigError, load_settings
from lockwatch.config.web import load_web_config
from lockwatch.publish.auth import BasicAuth
from lockwatch.settings.web import WebConfigError

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_full_file_loads_with_paths_relative_to_it(tmp_path: Path) -> None:
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
        "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"
        f"  min_version: TLS13\nbasic_auth_users:\n  prometheus: '{HASH}'\n"
    )
    web = load_web_config(tmp_path / "web.yml")
    assert web.cert_file == tmp_path / "tls.crt" and web.client_ca_file == tmp_path / "ca.crt"
    assert (web.tls, web.scheme, web.min_version) == (True, "https", "TLS13")
    assert web.users == (("prometheus", HASH),)
    assert HASH not in repr(web)


def test_every_problem_is_reported_at_once_and_a_password_is_never_echoed(tmp_path: Path) -> None:
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n  cert_file: missing.crt\n  cipher_suites: [x]\n"
        "  min_version: SSL3\n"
        "basic_auth_users:\n  prometheus: plain-password-here\n"
        "http_server_config: {http2: true}\n"
    )
    with pytest.raises(WebConfigError) as error:
        load_web_config(tmp_path / "web.yml")
    problems = [p.split(": ", 1)[1] for p in error.value.problems]
    assert sorted(problems) == sorted(
        [
            "http_server_config: not supported by lockwatch (tls_server_config, basic_auth_users)",
            "tls_server_config.cipher_suites: not supported by lockwatch (cert_file, key_file, "
            "client_ca_file, client_auth_type, min_version)",
            f"tls_server_config.cert_file: no such file: {tmp_path / 'missing.crt'}",
            "tls_server_config: needs both cert_file and key_file",
            "tls_server_config.min_version: one of TLS12, TLS13",
            "basic_auth_users.prometheus: not a bcrypt hash (htpasswd -nBC 10 USER)",
        ]
    )
    assert "plain-password-here" not in str(error.value)


def test_check_config_reports_the_web_config_file_s_problems_with_its_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "web.yml").write_text("basic_auth_users: [nope]\n")
    (tmp_path / "lockwatch.yml").write_text(
        "targets: [{name: main, dsn: 'host=127.0.0.1'}]\nweb_config: web.yml\n"
    )
    with pytest.raises(ConfigError) as error:
        load_settings(tmp_path / "lockwatch.yml")
    assert "lockwatch.yml:2: web_config: " in str(error.value)
    assert "basic_auth_users: must be a mapping" in str(error.value)


def test_basic_auth_lets_only_the_right_password_in() -> None:
    auth = BasicAuth((("prometheus", HASH),))
    assert auth.check(basic("prometheus", "s3cret")) == (True, "prometheus")
    assert auth.check(basic("prometheus", "s3cret")) == (True, "prometheus")  # remembered
    assert auth.check(basic("prometheus", "wrong")) == (False, "prometheus")
    assert auth.check(basic("admin", "s3cret")) == (False, "admin")
    assert auth.check(None) == (False, "")
    assert auth.check("Bearer s3cret") == (False, "")
