"""slurmadm.files: atomic writes and lock files."""

from __future__ import annotations

import os

import pytest

from slurmadm.errors import LockBusy
from slurmadm.files import exclusive_lock, write_atomic

pytestmark = pytest.mark.unit


def test_write_atomic_replaces_in_one_step(tmp_path):
    path = tmp_path / "f.conf"
    write_atomic(path, "one\n")
    inode = path.stat().st_ino
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n" and path.stat().st_ino != inode


def test_exclusive_lock_refuses_a_second_holder_names_the_first_and_is_released(tmp_path):
    path = tmp_path / "sub" / "op.lock"
    with exclusive_lock(path, lambda holder: f"busy: {holder}"):
        with pytest.raises(LockBusy, match=rf"^busy: pid {os.getpid()} on \S+ since \d{{4}}-"):
            with exclusive_lock(path, lambda holder: f"busy: {holder}"):
                pass
    with exclusive_lock(path, lambda holder: "still held"):
        pass
