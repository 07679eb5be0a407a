"""``target_sources:``, ``auth_modules:`` and ``shard:`` in the config file."""

from __future__ import annotations

from pathlib import Path

from lockwatch.config.load import load_settings
from lockwatch.settings.sharding import Shard
from tests.unit.config.test_loader import problems_of, write

PASSWORD = "pw-in-a-file"

FLEET = """
shard: lockwatch-2/3
defaults: {interval: 3s}
auth_modules:
  - name: monitor
    user: lockwatch
    password_file: monitor-password
    sslmode: verify-full
    options: {connect_timeout: "4"}
target_sources:
  - name: clusters
    file: clusters.json
    auth_module: monitor
  - name: inventory
    url: http://127.0.0.1:8080/sd
    auth_module: monitor
    refresh_interval: 30s
    timeout: 2s
"""


def test_a_fleet_config_needs_no_targets_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "monitor-password").write_text(PASSWORD + "\n")
    settings = load_settings(write(tmp_path, FLEET), {})

    assert settings.targets == ()
    assert settings.sharding == Shard(2, 3)
    (module,) = settings.auth_modules
    assert (module.user, module.password, module.sslmode) == ("lockwatch", PASSWORD, "verify-full")
    files, urls = settings.target_sources
    assert files.file == tmp_path / "clusters.json"
    assert (files.kind, files.every) == ("file", 5.0)
    assert (urls.kind, urls.every, urls.timeout) == ("http", 30.0, 2.0)
    assert settings.target_defaults == (("interval", 3.0),)
    assert PASSWORD not in repr(settings)


def test_each_mistake_of_a_fleet_config_is_told_at_its_path(tmp_path: Path) -> None:
    text = """
    shard: 3/3
    auth_modules:
      - name: monitor
        user: lockwatch
        password: written-here
        options: {password: x, bogus_option: y}
    target_sources:
      - name: both
        file: a.json
        url: http://127.0.0.1:1/
        auth_module: monitor
      - name: neither
        auth_module: monitor
    """
    problems = {p.path: p.message for p in problems_of(write(tmp_path, text))}

    assert "the index goes from 0 to 2" in problems["shard"]
    assert "auth_modules[0].password" in problems
    assert "may not set password" in problems["auth_modules[0].options"]
    assert problems["target_sources[0]"] == "needs exactly one of file (file_sd) and url (http_sd)"
    assert problems["target_sources[1]"] == problems["target_sources[0]"]
    assert "written-here" not in str(problems)


def test_a_config_with_neither_targets_nor_sources_is_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, "listen: 127.0.0.1:1\n"))

    assert problem.message == "needs at least one target (or target_sources to find them)"


def test_a_source_naming_no_auth_module_is_refused(tmp_path: Path) -> None:
    text = """
    auth_modules: [{name: monitor, user: lockwatch}]
    target_sources: [{name: fleet, file: sd.json, auth_module: nobody}]
    """
    (problem,) = problems_of(write(tmp_path, text))

    assert problem.path == "target_sources[0].auth_module"
    assert problem.message == "no auth module named 'nobody' (auth_modules: monitor)"
