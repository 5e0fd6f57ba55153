"""The LogManager: owner of log dirs, topics and background work (see :mod:`.manager`)."""

from tidelog.manager.manager import LogDirInfo, LogManager, PartitionInfo, SetAside, TopicDescription

__all__ = ["LogDirInfo", "LogManager", "PartitionInfo", "SetAside", "TopicDescription"]
