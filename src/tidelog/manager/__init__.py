"""The LogManager: owner of log dirs, topics and background work (see :mod:`.manager`)."""

from tidelog.manager.manager import LogManager
from tidelog.manager.reports import (
    LogDirInfo,
    PartitionFetch,
    PartitionInfo,
    PartitionOffsets,
    SetAside,
    TopicDescription,
)

__all__ = ["LogDirInfo", "LogManager", "PartitionFetch", "PartitionInfo", "PartitionOffsets", "SetAside",
           "TopicDescription"]
