"""The head exporter carries each node's fleet-relative share from its last burn-in and how many
sweeps in a row found it slow (what the BurninStraggler alert reads), from a store filled by the
sweep logic (fake Slurm, real store)."""

from __future__ import annotations

import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from slurmadm.exporter.exposition import render
from slurmadm.exporter.head import HeadCollector
from slurmadm.site import parse_site

from tests.unit.burnin.test_straggler_sweep import one_sweep
from tests.unit.burnin.test_sweep_logic import EXAMPLE, FakeSlurm, fleet

pytestmark = pytest.mark.unit


def samples(text: str, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_head_exporter_shares_and_slow_sweeps(tmp_path):
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp_path}/s.db")
    site = parse_site(text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl"))
    slurm = FakeSlurm(fleet(40))
    one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0})

    class NoSlurm:
        def read(self):
            raise AssertionError("not read here")

    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadCollector(site=site, source=NoSlurm(), cache_s=0, deadline_s=10, store_path=f"{tmp_path}/s.db"))
    out = render(reg).decode()
    slow = samples(out, "slurmadm_burnin_slow_sweeps")
    assert slow[(("node", "b200-008"),)] == 2 and slow[(("node", "b200-001"),)] == 0 and len(slow) == 8
    share = samples(out, "slurmadm_burnin_fleet_share")
    assert share[(("metric", "stress-tflops"), ("node", "b200-008"))] == pytest.approx(800 / 1002.5, abs=1e-3)
    assert share[(("metric", "allreduce-node"), ("node", "b200-003"))] == 1.0
