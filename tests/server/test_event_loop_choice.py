"""``tidelog.server.event.loop``: the broker's connections on uvloop (the default) or asyncio's own
loop. (The server tests run on asyncio's with ``TIDELOG_TEST_EVENT_LOOP=asyncio``; the pipelining
tests take both.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import uvloop
from kafka.protocol.metadata import MetadataResponse
import server_samples as samples
from server_helpers import Broker

from tidelog.errors import ConfigError
from tidelog.server.server import new_event_loop
from tidelog.storage.config import BrokerConfig


def test_the_event_loop_key_defaults_to_uvloop_and_takes_asyncio() -> None:
    assert BrokerConfig.from_properties({"log.dirs": "/nowhere"}).get("tidelog.server.event.loop") == "uvloop"
    assert BrokerConfig.from_properties({"log.dirs": "/nowhere", "tidelog.server.event.loop": "UVLOOP"}).get(
        "tidelog.server.event.loop") == "uvloop"


def test_new_event_loop_makes_the_kind_named() -> None:
    for kind, is_uvloop in (("uvloop", True), ("asyncio", False)):
        loop = new_event_loop(kind)
        try:
            assert isinstance(loop, uvloop.Loop) == is_uvloop
        finally:
            loop.close()


def test_an_unknown_event_loop_is_refused_with_the_key_named(make_broker: Callable[..., Broker]) -> None:
    with pytest.raises(ConfigError, match="tidelog.server.event.loop") as refused:
        make_broker(**{"tidelog.server.event.loop": "trio"})
    assert "asyncio, uvloop" in str(refused.value)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_the_server_runs_on_the_configured_loop(make_broker: Callable[..., Broker], kind: str) -> None:
    broker = make_broker(**{"tidelog.server.event.loop": kind})
    assert isinstance(broker.loop, uvloop.Loop) == (kind == "uvloop")
    broker.manager.create_topic("t", 1)
    assert broker.connect().call(samples.metadata("t"), MetadataResponse, 12).topics[0].error_code == 0
