"""The remote tier's passes make at most one LIST per partition: the first copy pass of a
process loads each partition's metadata (one LIST of its ``metadata/`` prefix), and every later
copy or retention pass works on the cached metadata. Counted on 50 tiered partitions through
``bench/bench_remote_passes.py``'s counting store (the same passes ``make bench`` times on 10,000)."""

from __future__ import annotations

from pathlib import Path

from bench.bench_remote_passes import counted_manager, run_passes

PARTITIONS = 50


def test_at_most_one_list_per_partition_per_pass(tmp_path: Path) -> None:
    manager, store = counted_manager(tmp_path, PARTITIONS)
    try:
        results = run_passes(manager, store)
        statuses = manager.remote_tier.status()
    finally:
        manager.shutdown()
    requests = {name: r["requests"] for name, r in results.items()}
    lists = {name: r.get("list", 0) for name, r in requests.items()}
    assert lists == {"copy_first": PARTITIONS, "copy_steady": 0, "retention_first": 1, "retention_steady": 0}, requests
    assert all(count <= PARTITIONS for count in lists.values())
    # the passes did their work (the counts are not those of passes that did nothing)
    assert requests["copy_first"]["put_file"] == requests["copy_steady"]["put_file"] == 4 * PARTITIONS
    assert requests["retention_first"].get("delete", 0) >= 5 * PARTITIONS
    assert requests["retention_steady"] == {}
    assert len(statuses) == PARTITIONS and all(s.remote_segments == 1 and s.last_error is None for s in statuses)
