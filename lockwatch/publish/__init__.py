"""Publishers: metrics, HTTP API and logs, all read from the board."""
