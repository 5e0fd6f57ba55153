"""A bug while serving a connection (not the client's input) closes that connection, logged with
its peer and the traceback, and the server goes on serving others."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from server_helpers import Broker, api_versions
from tidelog.server import connection


def test_an_unexpected_error_closes_the_connection_logged_with_its_peer(
        broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*args: Any) -> bool:
        raise RuntimeError("a bug in the answer path")

    monkeypatch.setattr(connection, "_answer", broken)
    client = broker.connect()
    with caplog.at_level(logging.ERROR):
        with pytest.raises(ConnectionError):
            api_versions(client)
    [record] = [r for r in caplog.records if "unexpected error" in r.getMessage()]
    assert record.name == "tidelog.server.connection" and "PLAINTEXT/" in record.getMessage()
    assert record.exc_info is not None and "a bug in the answer path" in str(record.exc_info[1])
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    monkeypatch.undo()
    assert api_versions(broker.connect()).error_code == 0  # the server goes on
