"""``tidelog users``: add, list and delete SASL users; the credentials file is a 0600 file in the
log dir root holding no password, which a broker still opens the log dir beside."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.server.security.credentials import CREDENTIALS_FILE, PlainCredential, load_credentials
from tidelog.server.security.scram import MECHANISMS, ScramCredential, new_credential
from tidelog.storage.config import BrokerConfig


def ok(data: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def test_add_stores_salted_credentials_never_the_password(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = ok(data, "users", "add", "alice", "--password-stdin", stdin=b"s3cret-pw\n")
    assert out == "User alice may authenticate with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.\n"
    path = data / CREDENTIALS_FILE
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"s3cret-pw" not in path.read_bytes()
    users = load_credentials(path)
    scram = users["alice"]["SCRAM-SHA-256"]
    assert isinstance(scram, ScramCredential) and scram.iterations == 4096
    assert new_credential(MECHANISMS["SCRAM-SHA-256"], "s3cret-pw", 4096, scram.salt) == scram
    plain = users["alice"]["PLAIN"]
    assert isinstance(plain, PlainCredential) and plain.matches("s3cret-pw") and not plain.matches("s3cret-pW")


def test_list_shows_mechanisms_and_iterations(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "users", "add", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192", "--password-stdin",
       stdin=b"pw\n")
    ok(data, "users", "add", "alice", "--mechanism", "PLAIN", "--password-stdin", stdin=b"pw\n")
    assert json.loads(ok(data, "users", "list", "--json")) == {"alice": {"PLAIN": 4096},
                                                               "bob": {"SCRAM-SHA-512": 8192}}
    table = ok(data, "users", "list").splitlines()
    assert [line.split()[0] for line in table] == ["User", "alice", "bob"]
    assert "SCRAM-SHA-512 (8192)" in table[2]


def test_add_again_replaces_only_the_mechanisms_given(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "users", "add", "alice", "--password-stdin", stdin=b"old\n")
    ok(data, "users", "add", "alice", "--mechanism", "PLAIN", "--password-stdin", stdin=b"new\n")
    users = load_credentials(data / CREDENTIALS_FILE)["alice"]
    plain = users["PLAIN"]
    assert isinstance(plain, PlainCredential) and plain.matches("new")
    scram = users["SCRAM-SHA-512"]
    assert new_credential(MECHANISMS["SCRAM-SHA-512"], "old", 4096, scram.salt) == scram


def test_delete_a_mechanism_then_the_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "users", "add", "alice", "--password-stdin", stdin=b"pw\n")
    assert ok(data, "users", "delete", "alice", "--mechanism", "PLAIN") == "Deleted PLAIN of user alice.\n"
    assert json.loads(ok(data, "users", "list", "--json")) == {"alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}}
    assert ok(data, "users", "delete", "alice") == "Deleted user alice.\n"
    assert json.loads(ok(data, "users", "list", "--json")) == {}


def test_bad_input_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, _, err = run_cli(data, "users", "delete", "nobody")
    assert code == 1 and "no user nobody" in err
    code, _, err = run_cli(data, "users", "add", "alice", "--iterations", "100", "--password-stdin", stdin=b"pw\n")
    assert code == 2 and "--iterations" in err
    code, _, err = run_cli(data, "users", "add", "alice", "--password-stdin", stdin=b"\n")
    assert code == 2 and "password is empty" in err
    code, _, err = run_cli(data, "users", "add", "al\nice", "--password-stdin", stdin=b"pw\n")
    assert code == 2 and "invalid user name" in err
    assert not (data / CREDENTIALS_FILE).exists()


def test_a_corrupt_credentials_file_is_reported_with_its_path(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / CREDENTIALS_FILE).write_text("{not json")
    code, _, err = run_cli(data, "users", "list")
    assert code == 1 and "invalid credentials file" in err and CREDENTIALS_FILE in err


def test_the_log_dir_still_opens_beside_the_credentials_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "users", "add", "alice", "--password-stdin", stdin=b"pw\n")
    ok(data, "topics", "create", "t", "--partitions", "1")
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        assert manager.topics() == ["t"] and not manager.set_aside()
    finally:
        manager.shutdown()
