"""What ``lockwatch terminate`` acts with: a role of its own, never the
monitoring role, which stays read-only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from lockwatch.settings.fields import Dsn, PositiveSeconds, Secret, Section


@dataclass(frozen=True, slots=True)
class ActionSettings(Section):
    # The server of the target, as a role with pg_signal_backend and
    # pg_read_all_stats (or pg_monitor): without the latter, backend_start is
    # NULL and the session cannot be told from a later one with its pid.
    # None: lockwatch terminate refuses. Or actions.dsn_file.
    dsn: Annotated[Dsn | None, Secret()] = field(default=None, repr=False)
    # how long terminate waits for the ended session (or cancelled statement) to go
    wait: PositiveSeconds = 10.0
