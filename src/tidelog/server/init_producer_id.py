"""InitProducerId (v0-v5, Kafka 4.0's range): producer ids for idempotent producers.

A request without a transactional id gets a fresh producer id at epoch 0, whatever producer id
and epoch it carries (v3+, KIP-360): Kafka's coordinator answers such requests the same way
("blindly accept the request and return a new producerId"); an idempotent producer bumps its
own epoch on the client side and asks for a new id only when it must.

Transactions are not served. A request naming a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and a message saying so: the Java client, librdkafka and
kafka-python treat that error as fatal for the transactional producer, so it fails at once
with a readable error instead of retrying until a timeout (a retriable error such as
COORDINATOR_NOT_AVAILABLE would make them wait out ``transaction.timeout.ms``/``max.block.ms``).
FindCoordinator for a transaction coordinator (key type 1) answers the same way.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from kafka.protocol.producer import InitProducerIdResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode
from tidelog.server.producer_id_manager import ProducerIdManager

TRANSACTIONS_REFUSED = ("tidelog does not support transactions: use an idempotent producer without "
                        "transactional.id (enable.idempotence=true is supported)")

_managers: weakref.WeakKeyDictionary[LogManager, ProducerIdManager] = weakref.WeakKeyDictionary()
_managers_lock = threading.Lock()


async def handle_init_producer_id(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    if body.transactional_id is not None:
        return _response(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    producer_id = await ctx.run(lambda: producer_ids(ctx.manager).generate_producer_id())
    return _response(ErrorCode.NONE, producer_id, 0)


def _response(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch)


def producer_ids(manager: LogManager) -> ProducerIdManager:
    """The allocator of ``manager``'s broker, created on first use (reads the block file of every
    log dir and the producer state of every live log). Thread-safe."""
    with _managers_lock:
        found = _managers.get(manager)
        if found is None:
            found = _managers[manager] = ProducerIdManager(
                [info.path for info in manager.log_dirs()], manager.highest_producer_id())
        return found

