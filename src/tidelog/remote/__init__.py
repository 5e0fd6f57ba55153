"""The remote tier (KIP-405 tiered storage): the object store and each partition's remote
segment metadata, kept in the store itself.

- :mod:`~tidelog.remote.store`: :class:`RemoteStore`, the object operations, on ``pyarrow.fs``
  (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``);
- :mod:`~tidelog.remote.metadata`: Kafka's ``RemoteLogSegmentMetadata`` and its states, and the
  names of a remote segment's objects;
- :mod:`~tidelog.remote.metadata_log`: :class:`RemotePartitionMetadata`, the partition's
  metadata as an append-only log of event objects plus snapshots (format in
  :mod:`~tidelog.remote.metadata_codec`, replay rules in :mod:`~tidelog.remote.metadata_state`);
- :mod:`~tidelog.remote.copy`: copying sealed segments (Kafka's ``copyLogSegment``), the
  candidates rule and the cleanup of what a crash left; the local files pinned during a copy in
  :mod:`~tidelog.remote.segment_files`, the upload quota in :mod:`~tidelog.remote.quota`;
- :mod:`~tidelog.remote.errors`: the typed errors.

A layer-3 package beside ``retention`` and ``cleaner``: it imports ``storage`` and the
foundation, and the manager composes it.
"""
