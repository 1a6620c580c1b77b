"""Which job a process belongs to, from /proc/<pid>/cgroup, on every release: numeric `job_<id>`
directories (cgroup v1; v2 up to 25.11; 26.05 with CgroupJobIdPaths=yes) and 26.05's default
SLUID-keyed cgroup v2 directories (the path Slurm's cgroup_v2 page shows)."""

from __future__ import annotations

import pytest

from slurmadm.health.nodechecks import job_of_cgroup

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("text,job", [
    ("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n", "4711"),  # cgroup v2, <= 25.11
    ("12:freezer:/slurm/uid_1000/job_99/step_batch\n11:memory:/slurm/uid_1000/job_99/step_batch\n", "99"),  # v1
    ("0::/system.slice/slurmstepd.scope/s5K1KKYAYG5D00/step_0/user/task_0\n", "s5K1KKYAYG5D00"),  # 26.05
    ("0::/system.slice/b200-001_slurmstepd.scope/s5K1KKYAYG5D00/step_batch/user/task_0\n", "s5K1KKYAYG5D00"),
    ("0::/system.slice/slurmstepd.scope/system\n", None),  # slurmstepd itself
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/system.slice/sshd.service\n", None),
])
def test_job_of_cgroup(text, job):
    assert job_of_cgroup(text) == job
