"""The log cleaner: Kafka's compaction (``cleanup.policy=compact``).

plan (what is dirty, which log is filthiest, why not) → offset_map (latest offset per key, bounded
memory) → retain (what survives, batch by batch) → clean (segment groups written to ``.cleaned``
and swapped in crash-safely) → log_cleaner (threads, throttle, metrics, the retention pass over
compacted logs) with manager (per-partition states, checkpoints, quarantine).
"""
