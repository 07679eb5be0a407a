"""``/api/v1/sd``: each watched target as an http_sd group pointing at this
instance, with what a per-target probe needs and never the DSN."""

from __future__ import annotations

import json

from lockwatch.publish.api.sd import sd_document
from lockwatch.settings.targets import Target
from lockwatch.state.board import Board


def test_each_target_is_a_group_with_this_address_and_its_probe_labels() -> None:
    board = Board()
    board.register(
        Target(
            name="db-1_5432",
            dsn="host=db-1 port=5432 user=lockwatch password=s3cret",
            discovered="inventory",
            labels=(("env", "prod"),),
        )
    )
    board.register(Target(name="own", dsn="postgresql://mon:pw@[::1]:6432/app"))

    groups = sd_document(board, "10.0.0.7:10057", "/metrics")

    assert groups == [
        {
            "targets": ["10.0.0.7:10057"],
            "labels": {
                "env": "prod",
                "postgres_instance": "db-1:5432",
                "__param_target": "db-1_5432",
                "__metrics_path__": "/metrics",
            },
        },
        {
            "targets": ["10.0.0.7:10057"],
            "labels": {
                "postgres_instance": "[::1]:6432",
                "__param_target": "own",
                "__metrics_path__": "/metrics",
            },
        },
    ]
    assert "s3cret" not in json.dumps(groups) and ":pw@" not in json.dumps(groups)
