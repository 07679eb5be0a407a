"""Targets from service discovery: the pure step from a source's list to targets.

Each address a target source lists (``host:port``) becomes a target whose DSN
is the address plus one auth module (:mod:`lockwatch.settings.sources`): the
password never comes from a label or a URL. Reading the lists is
:mod:`lockwatch.sample.discovery`'s; applying them, :mod:`lockwatch.fleet`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lockwatch.model.discovery import TargetGroup
from lockwatch.settings.fields import check_name
from lockwatch.settings.sources import AuthModule, TargetSource
from lockwatch.settings.targets import Target, parse_listen

# Labels lockwatch reads; the others are kept and served again by /api/v1/sd.
DATABASE_LABEL, AUTH_LABEL, NAME_LABEL = "database", "auth_module", "name"
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_SECRET_LABEL = re.compile(r"pass|secret|token", re.I)


def target_name(address: str, database: str | None) -> str:
    """A discovered target's name when no ``name`` label gives one.

    >>> target_name("db-1.internal:5432", None), target_name("[::1]:5432", "orders")
    ('db-1.internal_5432', '_1_5432_orders')
    """
    base = address if database is None else f"{address}_{database}"
    return _NOT_A_NAME.sub("_", base)


def _host_port(address: str) -> tuple[str, int] | str:
    """The address as host and port, or what is wrong with it (never quoting a
    value that may hold credentials)."""
    if "@" in address or "/" in address:
        return "an address with '@' or '/' (credentials come only from auth_modules)"
    try:
        host, port = parse_listen(address)
    except ValueError as exc:
        return str(exc)
    return (host, port) if port else f"address {address!r} has port 0"


def _target(
    source: TargetSource,
    group: TargetGroup,
    address: str,
    modules: Mapping[str, AuthModule],
    defaults: Mapping[str, object],
) -> Target | str:
    where = _host_port(address)
    if isinstance(where, str):
        return where
    module_name = group.label(AUTH_LABEL) or source.auth_module
    module = modules.get(module_name)
    if module is None:
        return f"{address}: no auth module named {module_name!r}"
    database = group.label(DATABASE_LABEL)
    name = group.label(NAME_LABEL) if len(group.targets) == 1 else None
    name = name or target_name(address, database)
    if check_name(name) is not None:
        return f"{address}: {check_name(name)}"
    labels = tuple(
        (key, value)
        for key, value in group.labels
        if key not in (AUTH_LABEL, NAME_LABEL) and not key.startswith("__")
    )
    return Target(
        name=name,
        dsn=module.dsn(*where, database),
        discovered=source.name,
        labels=labels,
        **defaults,  # type: ignore[arg-type]  # validated by the config reader
    )


def discovered_targets(
    source: TargetSource,
    groups: tuple[TargetGroup, ...],
    modules: Mapping[str, AuthModule],
    defaults: Mapping[str, object],
) -> tuple[tuple[Target, ...], tuple[str, ...]]:
    """The targets a source's list makes, and why each rejected entry made none.

    An address listed twice is one target; a label that looks like it carries a
    password rejects its group: credentials come from auth modules only.
    """
    found: dict[str, Target] = {}
    problems: list[str] = []
    for group in groups:
        secret = next((key for key, _ in group.labels if _SECRET_LABEL.search(key)), None)
        if secret is not None:
            problems.append(
                f"label {secret!r} looks like a credential: its {len(group.targets)} "
                "target(s) are ignored (credentials come only from auth_modules)"
            )
            continue
        for address in group.targets:
            made = _target(source, group, address, modules, defaults)
            if isinstance(made, str):
                problems.append(made)
            else:
                found.setdefault(made.name, made)
    return tuple(found.values()), tuple(problems)
