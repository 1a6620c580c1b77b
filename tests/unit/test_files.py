"""slurmadm.files: atomic writes."""

from __future__ import annotations

import pytest

from slurmadm.files import write_atomic

pytestmark = pytest.mark.unit


def test_write_atomic_replaces_in_one_step(tmp_path):
    path = tmp_path / "f.conf"
    write_atomic(path, "one\n")
    inode = path.stat().st_ino
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n" and path.stat().st_ino != inode
