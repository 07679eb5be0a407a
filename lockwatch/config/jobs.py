"""``jobs``, ``pings`` and a target's ``pgbouncer``.

Every key is a field of :mod:`lockwatch.settings.jobs` or
:mod:`lockwatch.settings.pooler`, by its name or alias. Where the YAML differs,
it is here:

- ``pings.store`` (sqlite or postgres) says whether ``pings.dsn`` is needed.
- A job's ``target`` may be left out when there is one target.
- A job without a query gets its runs from pings, which then need a token and
  somewhere to keep them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any

from lockwatch.config.keys import field_key, file_keys
from lockwatch.config.reader import Reading, Shape
from lockwatch.config.targets import TARGETS
from lockwatch.config.yamldata import FAILED, YamlMap
from lockwatch.settings.fields import Text, check
from lockwatch.settings.jobs import JobSpec, PingSettings

_STORE = "store"
_STORES = ("sqlite", "postgres")


def _check_store(store: str) -> str | None:
    return None if store in _STORES else f"expected one of {', '.join(_STORES)}, got {store!r}"


Store = Annotated[Text, check(_check_store)]


class Jobs:
    """What the jobs are checked against: the pings and whether state_dir is set."""

    def __init__(self) -> None:
        self.pings = PingSettings()
        self.state_dir = False

    def shapes(self) -> dict[type, Shape]:
        return {PingSettings: _PingsShape(), JobSpec: _JobShape(self)}


class _PingsShape(Shape):
    def keys(self, reading: Reading, cls: type[Any], raw: YamlMap) -> Collection[str]:
        return [*file_keys(cls), _STORE]

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        store = _STORES[0]
        if _STORE in data:
            chosen = reading.value(Store, data.pop(_STORE), (*raw.loc, _STORE))
            store = store if chosen is FAILED else chosen
        dsn = field_key(PingSettings, "store_dsn")
        given = [key for key in (dsn.key, dsn.file_key) if key in data]
        if store == "postgres" and not given:
            reading.report(raw.loc, f"missing required key {dsn.key!r} (or {dsn.file_key!r})")
        elif store != "postgres" and given:
            reading.report(raw.loc, "a dsn is only for store: postgres")
            for key in given:
                del data[key]
        return data


class _JobShape(Shape):
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def before(self, reading: Reading, raw: YamlMap, data: dict[str, object]) -> dict[str, object]:
        targets = reading.names(TARGETS)
        listed = ", ".join(sorted(targets))
        if "target" not in data:
            if len(targets) == 1:
                data["target"] = next(iter(targets))
            else:
                reading.report(raw.loc, f"missing required key 'target' (one of: {listed})")
            return data
        target = reading.peek(field_key(JobSpec, "target").annotation, data["target"])
        if target is not None and target not in targets:
            reading.report((*raw.loc, "target"), f"no target named {target!r} (targets: {listed})")
            data["target"] = FAILED
        return data

    def after(self, reading: Reading, raw: YamlMap, value: Any) -> Any:
        job: JobSpec = value
        if job.query is not None:
            return job
        # Without a query, the job's runs can only come from pings.
        if self.jobs.pings.token is None:
            reading.report(
                raw.loc,
                "has no query, so its runs come from pings: set pings.token (or pings.token_file)",
            )
        elif self.jobs.pings.store_dsn is None and not self.jobs.state_dir:
            reading.report(
                raw.loc,
                "pinged runs are kept in state_dir: set state_dir, or pings.store: postgres",
            )
        return job
