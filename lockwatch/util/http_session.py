"""A requests session whose calls :func:`lockwatch.util.deadline.within` can
bound: its pools hand each connection they give out to the calling thread's
deadline. Imported where a session is made, so that a process that makes no
HTTP call never loads requests."""

from __future__ import annotations

from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from lockwatch.util.deadline import watched


class _HTTPPool(HTTPConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return watched(super()._get_conn(timeout))


class _HTTPSPool(HTTPSConnectionPool):
    def _get_conn(self, timeout: float | None = None) -> Any:
        return watched(super()._get_conn(timeout))


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _DeadlineAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        # A SOCKS proxy has pools of its own kind (its calls keep per-read timeouts).
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = _POOLS
        return manager


def deadline_session() -> requests.Session:
    """A session whose calls :func:`lockwatch.util.deadline.within` can bound."""
    session = requests.Session()
    adapter = _DeadlineAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
