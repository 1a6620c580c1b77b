"""The qualification gate judges speed too: a node whose qualification job is slow against its
profile's burn-in baseline fails the gate (`straggler`), so a straggler drained by burn-in is not
returned by its ladder's reboot and qualification while still slow (the fleet replay, issue 37)."""

from __future__ import annotations

import pytest

from slurmadm.burnin import history
from slurmadm.repair.qualify import against_baseline
from slurmadm.site import parse_site
from slurmadm.store import Store
from tests.unit.burnin.test_fleet import gpu_node
from tests.unit.burnin.test_sweep_logic import EXAMPLE

pytestmark = pytest.mark.unit

BASE = {"hgx-b200": {"stress-tflops": {"median": 1002.0, "mad": 2.0, "nodes": 8}}}


def site_of(tmp_path, enabled=True):
    text = EXAMPLE.read_text().replace("/var/lib/slurmadm/slurmadm.db", f"{tmp_path}/s.db")
    text = text.replace("/var/log/slurmadm/audit.jsonl", f"{tmp_path}/audit.jsonl")
    if not enabled:
        text = text.replace("[burnin.straggler]\nenabled = true ", "[burnin.straggler]\nenabled = false")
    return parse_site(text)


def test_slow_against_the_baseline_fails_the_gate(tmp_path):
    site = site_of(tmp_path)
    store = Store(site.store.path)
    slow = gpu_node("b200-001", tflops=700.0)["tests"]
    assert against_baseline(site, store, "b200-001", slow) is None  # no baseline kept yet: nothing judged
    history.set_baselines(store, BASE, source="sweep commissioning")
    worst = against_baseline(site, store, "b200-001", slow)
    assert (worst["metric"], worst["scope"], worst["level"]) == ("stress-tflops", "baseline", "slow")
    assert against_baseline(site, store, "b200-001", gpu_node("b200-001", tflops=1000.0)["tests"]) is None
    assert against_baseline(site, store, "zz-999", slow) is None  # not a node of the site


def test_with_fleet_verdicts_off_speed_is_not_judged(tmp_path):
    site = site_of(tmp_path, enabled=False)
    store = Store(site.store.path)
    history.set_baselines(store, BASE, source="sweep commissioning")
    assert against_baseline(site, store, "b200-001", gpu_node("b200-001", tflops=700.0)["tests"]) is None
