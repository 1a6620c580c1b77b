"""NCCL all-reduce: the busbw formula, parsing nccl-tests' output, and slurmadm's own
torch.distributed implementation (run here on CPU with the gloo backend: it proves the program,
not the bandwidth)."""

from __future__ import annotations


import pytest

from slurmadm.health import allreduce, nccl
from slurmadm.health.checks import CannotRun

pytestmark = pytest.mark.unit

# all_reduce_perf -b 4G -e 4G -f 2 -g 8 (nccl-tests 2.x layout), numbers illustrative
OUTPUT = """# nThread 1 nGpus 8 minBytes 4294967296 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  12345 on   b200-001 device  0 [0x1b] NVIDIA B200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  4294967296    1073741824     float     sum      -1   9853.1  435.90  762.83      0   9847.0  436.17  763.30      {wrong}
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 763.065
#
"""


def test_busbw_formula_matches_nccl_tests():
    # algbw 435.90 GB/s on 8 ranks -> busbw = algbw * 2 * 7 / 8 (nccl-tests' own row above)
    assert allreduce.busbw(435.90, 8) == pytest.approx(762.83, rel=1e-3)
    assert allreduce.busbw(1.0, 2) == pytest.approx(1.0)


def test_parse_all_reduce_perf():
    assert nccl.parse_all_reduce_perf(OUTPUT.format(wrong=0)) == nccl.NcclRun(763.065, 0, 0)
    assert nccl.parse_all_reduce_perf(OUTPUT.format(wrong=3)) == nccl.NcclRun(763.065, 0, 3)
    with pytest.raises(CannotRun, match="no 'Avg bus bandwidth' line"):
        nccl.parse_all_reduce_perf("NCCL WARN Cuda failure 'out of memory'\n")


def test_gloo_allreduce_program_runs_and_reports_busbw():
    """The one all-reduce program (health check and burn-in) on CPU tensors; torch comes with the
    test setup (scripts/test.sh installs the CPU build)."""
    assert allreduce.import_torch() is not None, "torch missing: run scripts/install-torch-cpu.sh .venv/bin/python"
    data = allreduce.run_local("gloo", 2, mib=4, iters=3, timeout=120)
    assert "error" not in data, data
    assert data["backend"] == "gloo" and data["ranks"] == 2 and data["wrong_elements"] == 0
    assert data["bytes"] == 4 << 20 and data["busbw_gbps"] > 0
    assert data["busbw_gbps"] == pytest.approx(data["algbw_gbps"] * 2 * 1 / 2, rel=1e-6)
