"""Kafka's ``KafkaApis``: one decoded request in, one response body out (None: no response)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tidelog.server import codec
from tidelog.server.api_versions import api_versions_response
from tidelog.server.cluster import handle_describe_cluster, handle_describe_log_dirs
from tidelog.server.codec import Request
from tidelog.server.configs import handle_alter_configs, handle_describe_configs, handle_incremental_alter_configs
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.fetch import handle_fetch
from tidelog.server.fetch_response import ResponseParts
from tidelog.server.groups.apis import (
    handle_delete_groups,
    handle_describe_groups,
    handle_find_coordinator,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_offset_commit,
    handle_offset_fetch,
    handle_sync_group,
)
from tidelog.server.groups.txn_apis import handle_txn_offset_commit
from tidelog.server.init_producer_id import handle_init_producer_id
from tidelog.server.list_offsets import handle_list_offsets
from tidelog.server.metrics.request_names import api_name, response_error_codes
from tidelog.server.metadata import handle_metadata
from tidelog.server.partitions import handle_create_partitions, handle_delete_records
from tidelog.server.produce import handle_produce
from tidelog.server.security.sasl import handle_sasl_authenticate, handle_sasl_handshake
from tidelog.server.staged_api import ABORT_STAGED_JOB, COMMIT_STAGED_JOB, STAGE_BATCHES
from tidelog.server.staged_writes import handle_abort_staged_job, handle_commit_staged_job, handle_stage_batches
from tidelog.server.topics import handle_create_topics, handle_delete_topics
from tidelog.server.transactions.apis import handle_add_offsets_to_txn, handle_add_partitions_to_txn, handle_end_txn
from tidelog.server.txn_admin import (
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
    handle_write_txn_markers,
)

Handler = Callable[[ApiContext, ConnectionInfo, Request], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    codec.PRODUCE: handle_produce,
    codec.FETCH: handle_fetch,
    codec.LIST_OFFSETS: handle_list_offsets,
    codec.METADATA: handle_metadata,
    codec.CREATE_TOPICS: handle_create_topics,
    codec.DELETE_TOPICS: handle_delete_topics,
    codec.DELETE_RECORDS: handle_delete_records,
    codec.DESCRIBE_CONFIGS: handle_describe_configs,
    codec.ALTER_CONFIGS: handle_alter_configs,
    codec.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    codec.CREATE_PARTITIONS: handle_create_partitions,
    codec.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    codec.DESCRIBE_CLUSTER: handle_describe_cluster,
    codec.OFFSET_COMMIT: handle_offset_commit,
    codec.OFFSET_FETCH: handle_offset_fetch,
    codec.FIND_COORDINATOR: handle_find_coordinator,
    codec.JOIN_GROUP: handle_join_group,
    codec.HEARTBEAT: handle_heartbeat,
    codec.LEAVE_GROUP: handle_leave_group,
    codec.SYNC_GROUP: handle_sync_group,
    codec.DESCRIBE_GROUPS: handle_describe_groups,
    codec.LIST_GROUPS: handle_list_groups,
    codec.DELETE_GROUPS: handle_delete_groups,
    codec.SASL_HANDSHAKE: handle_sasl_handshake,
    codec.SASL_AUTHENTICATE: handle_sasl_authenticate,
    codec.INIT_PRODUCER_ID: handle_init_producer_id,
    codec.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    codec.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    codec.END_TXN: handle_end_txn,
    codec.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    codec.WRITE_TXN_MARKERS: handle_write_txn_markers,
    codec.DESCRIBE_PRODUCERS: handle_describe_producers,
    codec.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    codec.LIST_TRANSACTIONS: handle_list_transactions,
    # tidelog's own, never advertised (server.staged_writes)
    STAGE_BATCHES: handle_stage_batches,
    COMMIT_STAGED_JOB: handle_commit_staged_job,
    ABORT_STAGED_JOB: handle_abort_staged_job,
}


async def handle(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> bytes | ResponseParts | None:
    """The framed response to ``request``, or None when none is sent (acks=0 Produce). A handler
    may frame its own response (Fetch: its records are not copied), returned as it is.

    Errors a handler cannot place in its response propagate (the connection is then closed)."""
    if request.api_key == codec.API_VERSIONS:
        body, version = api_versions_response(request)
        ctx.metrics.requests.on_errors("ApiVersions", response_error_codes(body))
        return codec.encode_response(request, body, version)
    return respond(ctx, request, await HANDLERS[request.api_key](ctx, conn, request))


def respond(ctx: ApiContext, request: Request, body: Any) -> bytes | ResponseParts | None:
    """The framed response of a handler's answer ``body`` to ``request`` (errors counted where
    the handler does not count its own); what :func:`handle` returns after the handler. Event loop."""
    if body is None or isinstance(body, (bytes, ResponseParts)):
        return body  # Fetch and Produce frame their responses and count their own errors (server.fetch, server.produce)
    ctx.metrics.requests.on_errors(api_name(request.api_key), response_error_codes(body))
    return codec.encode_response(request, body)
