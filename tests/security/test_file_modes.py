"""Modes of what tidelog creates, even under a permissive umask (0): no file or dir writable by
group or others — data files and checkpoints 0644, dirs 0755 (what Kafka's broker creates under the
usual umask 022), the credentials file and its temporaries 0600. Found here: under umask 0 the
CLI and ``tidelog serve`` created world-writable dirs (0777) and checkpoints (0666)."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from abuse_helpers import Served, tidelog

PERMISSIVE = 0o000


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def _check(modes: dict[str, int]) -> None:
    for name, mode in modes.items():
        assert mode & 0o022 == 0, f"{name} is {mode:o}: writable by group or others"
        if name.endswith("tidelog-credentials.json"):
            assert mode == 0o600, f"{name} is {mode:o}"


def test_the_cli_and_serve_create_nothing_others_can_write_under_umask_0(serve: Callable[..., Served],
                                                                       tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert tidelog("topics", "create", "t", "--partitions", "2", data=data, umask=PERMISSIVE).returncode == 0
    assert tidelog("produce", "t", data=data, umask=PERMISSIVE, input="a\nb\n").returncode == 0
    assert tidelog("users", "add", "bob", "--password-stdin", data=data, umask=PERMISSIVE, input="pw\n").returncode == 0
    served = serve(data, umask=PERMISSIVE)
    client = served.raw()
    assert client.call(samples.create_topics("u", 2), CreateTopicsResponse, 7).topics[0].error_code == 0
    answer = client.call(samples.produce("u", records=samples.record_batch(b"v")), ProduceResponse, 9)
    assert answer.responses[0].partition_responses[0].error_code == 0
    assert served.stop() == 0
    modes = _modes(data)
    assert {"t-0", "u-1", "meta.properties", "t-0/00000000000000000000.log", ".lock",
            "recovery-point-offset-checkpoint", "tidelog-credentials.json"} <= set(modes)
    _check(modes)
    assert modes["t-0/00000000000000000000.log"] == modes["meta.properties"] == 0o644
    assert modes["t-0"] == modes["."] == 0o755
