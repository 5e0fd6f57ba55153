"""Staging dirs (storage/staging_dirs.py); the reclaim end to end is in tests/manager/test_staged_commit.py."""

from __future__ import annotations

from tidelog.storage.staging_dirs import Lease, scratch_lease, scratch_name


def test_a_scratch_dir_name_gives_its_owner_and_no_other_name_does() -> None:
    lease = Lease("host-a", 4242, 777, "0f1e2d", 4026531836)
    assert scratch_lease(scratch_name(lease)) == lease
    assert scratch_lease(scratch_name(None)) is None
    # a job dir whose key happens to have the shape of a scratch name's owner is no scratch dir
    assert scratch_lease("job-1-2-3-4@host-a") is None
    assert scratch_lease("batch-7") is None
