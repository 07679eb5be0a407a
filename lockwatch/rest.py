"""A serverless target's rest: after ``sleep.after`` with lockwatch its
server's only client, the session is closed, so that the compute may suspend,
and the target is looked at only every ``sleep.interval`` (a look connects,
and may wake it). A client seen at a look wakes its cadence up.

The look is a read, made in a poll's sample step; what it means is decided
in the apply step, when the session may be closed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from lockwatch.model.locks import LockSnapshot
from lockwatch.sample.base import SampleError
from lockwatch.sample.serverless import other_clients
from lockwatch.sample.session import TargetSession
from lockwatch.settings.targets import Target

log = logging.getLogger(__name__)


def look_alone(target: Target, session: TargetSession, snapshot: LockSnapshot) -> bool:
    """Whether lockwatch's session is the server's only client; False when
    that cannot be told (a failed look never lets a server sleep). Sessions
    waiting on a lock wake the cadence, whatever their names say."""
    if snapshot.waiting:
        return False
    try:
        return other_clients(session) == 0
    except SampleError as exc:
        log.warning("%s: cannot tell whether the server has other clients: %s", target.name, exc)
        return False


@dataclass
class Rest:
    """Since when lockwatch has been a serverless target's only client."""

    target: Target
    alone_since: datetime | None = None

    def decide(
        self, alone: bool | None, now: datetime, asleep_since: datetime | None
    ) -> datetime | None:
        """Since when the target is left to sleep (``asleep_since``: since
        when it was), None while awake; ``alone``: the look of this poll
        (None: no look, as while the target is down)."""
        if alone is None:
            self.alone_since = None
            return None
        if not alone:
            if asleep_since is not None:
                log.info(
                    "%s: the server has clients again; polling every %gs",
                    self.target.name,
                    self.target.interval,
                )
            self.alone_since = None
            return None
        self.alone_since = self.alone_since or now
        if now - self.alone_since < timedelta(seconds=self.target.sleep.after):
            return None
        if asleep_since is None:
            log.info(
                "%s: lockwatch has been the server's only client for %gs: letting it sleep, "
                "looking again every %gs",
                *(self.target.name, self.target.sleep.after, self.target.sleep.interval),
            )
        return asleep_since or now
