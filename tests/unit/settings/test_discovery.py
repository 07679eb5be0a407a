"""From a target source's list to targets: names, DSNs from auth modules,
labels kept, and entries that would carry credentials refused."""

from __future__ import annotations

import psycopg.conninfo

from lockwatch.model.discovery import TargetGroup
from lockwatch.settings.discovery import discovered_targets, target_name
from lockwatch.settings.sources import AuthModule, TargetSource

PASSWORD = "s3cret-monitor"
MODULES = {
    "monitor": AuthModule(name="monitor", user="lockwatch", password=PASSWORD, sslmode="require"),
    "legacy": AuthModule(name="legacy", user="old", dbname="app", options={"connect_timeout": "3"}),
}
SOURCE = TargetSource(name="fleet", auth_module="monitor", file=None, url="http://sd.local/")


def make(*groups: TargetGroup, defaults: dict[str, object] | None = None) -> tuple:  # type: ignore[type-arg]
    return discovered_targets(SOURCE, groups, MODULES, defaults or {})


def test_each_address_becomes_a_target_whose_dsn_is_the_address_and_the_auth_module() -> None:
    (target,), problems = make(TargetGroup(("db-1.internal:6432",), (("env", "prod"),)))

    assert problems == ()
    assert target.name == "db-1.internal_6432"
    assert target.instance == "db-1.internal:6432"
    assert target.discovered == "fleet"
    assert target.labels == (("env", "prod"),)
    parts = psycopg.conninfo.conninfo_to_dict(target.dsn)
    assert parts == {
        "host": "db-1.internal",
        "port": "6432",
        "dbname": "postgres",
        "user": "lockwatch",
        "password": PASSWORD,
        "sslmode": "require",
    }


def test_labels_choose_the_database_the_auth_module_and_the_name() -> None:
    groups = (
        TargetGroup(("10.0.0.5:5432",), (("auth_module", "legacy"), ("database", "orders"))),
        TargetGroup(("10.0.0.6:5432",), (("name", "billing"),)),
    )
    (orders, billing), problems = make(*groups)

    assert problems == ()
    assert orders.name == "10.0.0.5_5432_orders"
    parts = psycopg.conninfo.conninfo_to_dict(orders.dsn)
    assert (parts["dbname"], parts["user"], parts["connect_timeout"]) == ("orders", "old", "3")
    assert "password" not in parts
    assert orders.labels == (("database", "orders"),)  # auth_module is lockwatch's, not shown
    assert billing.name == "billing"


def test_a_name_label_on_a_group_of_several_addresses_names_none_of_them() -> None:
    targets, _ = make(TargetGroup(("a:5432", "b:5432"), (("name", "same"),)))

    assert [t.name for t in targets] == ["a_5432", "b_5432"]


def test_the_defaults_apply_to_every_discovered_target() -> None:
    (target,), _ = make(TargetGroup(("a:5432",)), defaults={"interval": 2.5})

    assert target.interval == 2.5


def test_an_address_listed_twice_is_one_target() -> None:
    targets, _ = make(TargetGroup(("a:5432",)), TargetGroup(("a:5432",), (("env", "x"),)))

    assert len(targets) == 1


def test_credentials_in_an_address_or_a_label_are_refused_and_never_repeated() -> None:
    groups = (
        TargetGroup(("app:hunter2@db:5432",)),
        TargetGroup(("db:5432",), (("password", "hunter2"),)),
        TargetGroup(("db:5433",), (("api_token", "hunter2"),)),
        TargetGroup(("ok:5432",)),
    )
    targets, problems = make(*groups)

    assert [t.name for t in targets] == ["ok_5432"]
    assert len(problems) == 3
    assert all("hunter2" not in problem for problem in problems)
    assert "credentials come only from auth_modules" in problems[0]


def test_a_wrong_address_or_an_unknown_auth_module_is_a_problem_naming_it() -> None:
    groups = (
        TargetGroup(("db",)),
        TargetGroup(("db:0",)),
        TargetGroup(("db:5432",), (("auth_module", "nobody"),)),
    )
    targets, problems = make(*groups)

    assert targets == ()
    assert "not host:port" in problems[0]
    assert "port 0" in problems[1]
    assert "no auth module named 'nobody'" in problems[2]


def test_a_name_made_from_an_ipv6_address_is_a_valid_target_name() -> None:
    assert target_name("[::1]:5432", None) == "_1_5432"
    (target,), _ = make(TargetGroup(("[::1]:5432",)))
    assert target.instance == "[::1]:5432"
