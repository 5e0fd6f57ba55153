"""InitProducerId (v0-v5, Kafka 4.0's range): producer ids for idempotent and transactional producers.

A request without a transactional id gets a fresh producer id at epoch 0, whatever producer id
and epoch it carries (v3+, KIP-360): Kafka's coordinator answers such requests the same way
("blindly accept the request and return a new producerId"); an idempotent producer bumps its
own epoch on the client side and asks for a new id only when it must.

A request with a transactional id goes to the transaction coordinator
(:meth:`~tidelog.server.transactions.coordinator.TransactionCoordinator.init_producer_id`: the id's
producer id at a bumped epoch, fencing the producer that held it). PRODUCER_FENCED is answered as
INVALID_PRODUCER_EPOCH below v4, as Kafka does.
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
from tidelog.server.transactions.apis import fenced_for
from tidelog.server.transactions.coordinator import transaction_coordinator

_managers: weakref.WeakKeyDictionary[LogManager, ProducerIdManager] = weakref.WeakKeyDictionary()
_managers_lock = threading.Lock()


async def handle_init_producer_id(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    if body.transactional_id is not None:
        expected_pid, expected_epoch = (body.producer_id, body.producer_epoch) if version >= 3 else (-1, -1)
        result = await transaction_coordinator(ctx).init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected_pid, expected_epoch)
        return _response(fenced_for(result.error, version, since=4), result.producer_id, result.producer_epoch)
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

