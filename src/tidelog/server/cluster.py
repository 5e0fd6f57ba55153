"""DescribeCluster (v0-v2) and DescribeLogDirs (v1-v4): what this single broker is and holds.

DescribeCluster: this broker, as it is advertised on the listener the request came in on, is the
only broker and also the controller (tidelog runs KRaft's combined roles in one process, so to
speak: there is no other node). A request for CONTROLLER endpoints is answered
MISMATCHED_ENDPOINT_TYPE, as a Kafka broker answers it. There is no authorizer, so the
authorized-operations field stays "not requested" (Kafka's INT32_MIN) unless asked, and then lists
every cluster operation.

DescribeLogDirs: every log dir with the size of each partition it holds (all partitions, or the
requested ones), the offset lag (always 0: there are no future replicas being moved between dirs)
and, from v4, the file system's total and usable bytes. An offline log dir (a disk fault:
:mod:`tidelog.manager.log_dir_failure`) answers KAFKA_STORAGE_ERROR with no topics and no sizes,
as Kafka's ``ReplicaManager.describeLogDirs``.
"""

from __future__ import annotations

import shutil
from typing import Any

from kafka.protocol.admin import DescribeClusterResponse, DescribeLogDirsResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode

BROKERS_ENDPOINT = 1
MISMATCHED_ENDPOINT_TYPE = 114
NOT_REQUESTED = None  # encoded as INT32_MIN, Kafka's "authorized operations were not requested"
# Kafka's AclOperation ids valid on a cluster: CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
# IDEMPOTENT_WRITE, ALTER, DESCRIBE
_CLUSTER_OPERATIONS = (3, 7, 8, 9, 10, 11, 12)

LogDirResult = DescribeLogDirsResponse.DescribeLogDirsResult
LogDirTopic = LogDirResult.DescribeLogDirsTopic
LogDirPartition = LogDirTopic.DescribeLogDirsPartition


async def handle_describe_cluster(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    endpoint_type = body.endpoint_type if request.api_version >= 1 else BROKERS_ENDPOINT
    if endpoint_type != BROKERS_ENDPOINT:
        return DescribeClusterResponse(throttle_time_ms=0, error_code=MISMATCHED_ENDPOINT_TYPE,
                                       error_message="The request was sent to an endpoint of type BROKER, but we "
                                                     "wanted an endpoint of type CONTROLLER",
                                       endpoint_type=endpoint_type, cluster_id=ctx.cluster_id or "",
                                       controller_id=-1, brokers=[], authorized_operations=NOT_REQUESTED)
    broker = DescribeClusterResponse.DescribeClusterBroker(broker_id=ctx.node_id, host=conn.advertised.host,
                                                           port=conn.advertised.port, rack=None, is_fenced=False)
    operations = set(_CLUSTER_OPERATIONS) if body.include_cluster_authorized_operations \
        else NOT_REQUESTED
    return DescribeClusterResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                   endpoint_type=BROKERS_ENDPOINT, cluster_id=ctx.cluster_id or "",
                                   controller_id=ctx.node_id, brokers=[broker],
                                   authorized_operations=operations)


async def handle_describe_log_dirs(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    topics = request.body.topics
    wanted = None if topics is None else {(t.topic, p) for t in topics for p in t.partitions}
    results = await ctx.run(describe_log_dirs, ctx.manager, wanted)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)


def describe_log_dirs(manager: LogManager, wanted: set[tuple[str, int]] | None) -> list[Any]:
    """One result per log dir. Runs in the thread pool."""
    results = []
    for info in manager.log_dirs():
        if info.offline is not None:
            results.append(LogDirResult(error_code=ErrorCode.KAFKA_STORAGE_ERROR, log_dir=str(info.path), topics=[],
                                        total_bytes=-1, usable_bytes=-1, is_cordoned=False))
            continue
        by_topic: dict[str, list[Any]] = {}
        for part in info.partitions:
            tp = part.topic_partition
            if wanted is None or (tp.topic, tp.partition) in wanted:
                by_topic.setdefault(tp.topic, []).append(
                    LogDirPartition(partition_index=tp.partition, partition_size=part.size, offset_lag=0,
                                    is_future_key=False))
        usage = shutil.disk_usage(info.path)
        results.append(LogDirResult(error_code=0, log_dir=str(info.path),
                                    topics=[LogDirTopic(name=name, partitions=sorted(parts,
                                                                                      key=lambda p: p.partition_index))
                                            for name, parts in sorted(by_topic.items())],
                                    total_bytes=usage.total, usable_bytes=usage.free, is_cordoned=False))
    return results
