"""Fleet-relative verdicts (slurmadm/burnin/fleet.py): median and MAD per profile, per scalable
unit and against a baseline, on recorded sweep results.

Recorded results: tests/fixtures/burnin/sweep-nvlink-down.json (a real dev-cluster sweep, see
test_report_page.py) and node entries shaped exactly as `burnin.stress.gpu_stress` and the
per-node job record them (`gpu_node` below copies that structure: per_gpu tflops / copy_gbps /
sm_clock_mhz / temp_c)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.burnin import fleet
from slurmadm.errors import SiteError
from slurmadm.site import parse_site
from slurmadm.site.burnin import FleetMetric

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "burnin" / "sweep-nvlink-down.json"
EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
S = fleet.Settings()


def gpu_node(name: str, tflops: float = 1000.0, busbw: float = 480.0, temp: float = 70.0, clock: float = 1965.0,
             verdict: str = "pass") -> dict:
    per_gpu = {str(g): {"tflops": tflops + g * 0.5, "copy_gbps": 3000.0 + g, "checksum": "1:2",
                        "sm_clock_mhz": clock, "temp_c": temp - g * 0.1} for g in range(8)}
    return {"node": name, "verdict": verdict, "busbw_gbps": busbw, "tests": [
        {"test": "stress", "status": "pass", "value": tflops, "unit": "TFLOPS",
         "data": {"device": "cuda", "seconds": 600, "per_gpu": per_gpu}},
        {"test": "allreduce-node", "status": "pass", "value": busbw, "unit": "GB/s", "data": {}},
        {"test": "health", "status": "pass", "data": {"checks": [
            {"check_id": "thermal", "status": "pass", "value": temp}]}}]}


def sweep(nodes, pairs=()):
    return {"nodes": list(nodes), "pairs": list(pairs)}


def ev(summary, *, profile="b200", units=None, settings=S, baselines=None):
    names = [n["node"] for n in summary["nodes"]]
    return fleet.evaluate(summary, profile_of={n: (profile(n) if callable(profile) else profile) for n in names},
                          unit_of=units or {n: "su1" for n in names}, settings=settings, baselines=baselines)


def test_metric_ids_are_the_ones_the_site_model_accepts():
    assert set(FleetMetric.__args__) == set(fleet.METRICS)


def test_values_from_a_recorded_dev_cluster_sweep():
    s = json.loads(FIXTURE.read_text())
    one = next(n for n in s["nodes"] if n["node"] == "b200-001")
    vals = fleet.node_values(one, s["pairs"])
    assert vals == {"stress-cpu": pytest.approx(0.4871176576813381), "allreduce-node": pytest.approx(0.969213111109606),
                    "thermal": 45.0, "allreduce-pair": pytest.approx((0.563607787297475 + 0.9648489304789168) / 2)}
    # three nodes passed (b200-002 failed its health check and is left out): fewer than min_nodes 4
    res = ev(s)
    assert set(res["nodes"]) == {"b200-001", "b200-003", "b200-004"}
    assert all(e["level"] == "none" for e in res["nodes"].values())
    assert all(not g["judged"] for g in res["groups"])
    # with min_nodes 3 the CPU/loopback noise of a loaded machine would flag b200-004 (46% of the
    # others): why the dev cluster's site leaves fleet verdicts off unless a test turns them on
    loose = ev(s, settings=fleet.Settings(min_nodes=3))
    assert loose["nodes"]["b200-004"]["metrics"]["allreduce-node"]["level"] == "slow"


def test_a_fleet_of_two_gives_no_verdict():
    res = ev(sweep([gpu_node("n1"), gpu_node("n2", tflops=500.0)]), settings=fleet.Settings(min_nodes=3))
    assert [e["level"] for e in res["nodes"].values()] == ["none", "none"]
    assert res["nodes"]["n2"]["metrics"]["stress-tflops"]["share"] == pytest.approx(500.0 / 750.0, abs=1e-3)


def test_one_slow_node_is_slow_and_the_reason_names_metric_value_and_median():
    nodes = [gpu_node(f"n{i}", tflops=1000.0 + i) for i in range(7)] + [gpu_node("n7", tflops=800.0)]
    res = ev(sweep(nodes))
    e = res["nodes"]["n7"]
    assert e["level"] == "slow"
    assert e["metrics"]["stress-tflops"]["fleet"]["level"] == "slow"
    assert e["metrics"]["allreduce-node"]["level"] == "ok"
    assert fleet.describe(e["worst"]) == "stress-tflops 800 = 80% of fleet median 1002"
    assert all(res["nodes"][f"n{i}"]["level"] == "ok" for i in range(7))
    g = next(g for g in res["groups"] if g["metric"] == "stress-tflops" and not g["unit"])
    assert (g["median"], g["nodes"], g["judged"]) == (1002.5, 8, True)


def test_warn_between_the_thresholds():
    nodes = [gpu_node(f"n{i}", busbw=480.0 + i) for i in range(5)] + [gpu_node("n5", busbw=430.0)]  # 89.5 %
    e = ev(sweep(nodes))["nodes"]["n5"]
    assert e["level"] == "warn" and e["worst"]["metric"] == "allreduce-node"


def test_half_the_fleet_slow_is_not_told_by_the_fleet_but_by_the_baseline():
    nodes = [gpu_node(f"f{i}", tflops=1000.0) for i in range(4)] + [gpu_node(f"s{i}", tflops=800.0) for i in range(4)]
    res = ev(sweep(nodes))
    # the median sits between the halves (~900): no node is 15% off it and the MAD is wide
    assert {e["metrics"]["stress-tflops"]["fleet"]["level"] for e in res["nodes"].values()} <= {"ok", "warn"}
    assert all(e["metrics"]["stress-tflops"]["fleet"]["level"] == "ok" for e in res["nodes"].values())
    base = {"b200": {"stress-tflops": {"median": 1001.75, "mad": 1.0, "nodes": 8}}}
    res = ev(sweep(nodes), baselines=base)
    assert [n for n, e in res["nodes"].items() if e["level"] == "slow"] == ["s0", "s1", "s2", "s3"]
    assert res["nodes"]["s0"]["worst"]["scope"] == "baseline"
    assert fleet.describe(res["nodes"]["s0"]["worst"]) == "stress-tflops 800 = 80% of baseline median 1002"
    # the whole profile's median against its baseline: a fleet that degraded together
    f = next(x for x in res["fleet"] if x["metric"] == "stress-tflops")
    assert f["share"] == pytest.approx(900.0 / 1001.75, abs=1e-3) and f["level"] == "warn"


def test_direction_temperature_lower_is_better():
    nodes = [gpu_node(f"n{i}", temp=70.0) for i in range(6)]
    hot = ev(sweep(nodes + [gpu_node("hot", temp=82.0)]))["nodes"]["hot"]  # 117 %
    assert hot["metrics"]["gpu-temp"]["level"] == "slow" and hot["metrics"]["thermal"]["level"] == "slow"
    cool = ev(sweep(nodes + [gpu_node("cool", temp=58.0)]))["nodes"]["cool"]  # 83 %: cooler is fine
    assert cool["level"] == "ok"
    slow_clock = ev(sweep(nodes + [gpu_node("clk", clock=1500.0)]))["nodes"]["clk"]
    assert slow_clock["metrics"]["gpu-clock"]["level"] == "slow"
    fast = ev(sweep(nodes + [gpu_node("fast", tflops=1300.0)]))["nodes"]["fast"]
    assert fast["level"] == "ok"  # faster than the fleet is never a straggler


def test_a_noisy_fleet_does_not_flag_its_ordinary_spread():
    spread = [1000.0, 900.0, 1100.0, 950.0, 1050.0, 880.0, 1120.0]
    nodes = [gpu_node(f"n{i}", tflops=v) for i, v in enumerate(spread)] + [gpu_node("x", tflops=870.0)]
    e = ev(sweep(nodes))["nodes"]["x"]["metrics"]["stress-tflops"]["fleet"]
    assert e["share"] < 0.92 and e["z"] < 3 and e["level"] == "ok"
    assert fleet.judge(900.0, 1000.0, 100.0, fleet.METRICS["stress-tflops"], fleet.Settings(mad_k=0))["level"] == "warn"


def test_scalable_unit_and_profile_groups():
    # unit su2 is uniformly slower on the pair all-reduce (its leaf switch); within su2 nobody stands out
    units = {f"n{i}": "su1" if i < 5 else "su2" for i in range(10)}
    nodes = [gpu_node(f"n{i}") for i in range(10)]
    pairs = [{"a": f"n{i}", "b": f"n{i + 1}", "status": "pass", "busbw_gbps": 48.0 if i < 5 else 40.0}
             for i in range(0, 10, 2)]
    # a node slow only against its own unit: n2's single-node all-reduce in su1 vs su1's peers
    nodes[2] = gpu_node("n2", busbw=400.0)
    res = ev(sweep(nodes, pairs), units=units)
    n2 = res["nodes"]["n2"]["metrics"]["allreduce-node"]
    assert n2["su"]["nodes"] == 5 and n2["su"]["level"] == "slow"
    su2 = res["nodes"]["n7"]["metrics"]["allreduce-pair"]
    assert su2["su"]["level"] == "ok" and su2["fleet"]["level"] == "slow"  # 83 % of the fleet
    # two profiles never judge each other
    res = ev(sweep([gpu_node(f"a{i}", tflops=1000.0) for i in range(4)] +
                   [gpu_node(f"h{i}", tflops=700.0) for i in range(4)]),
             profile=lambda n: "b200" if n.startswith("a") else "h100")
    assert all(e["level"] == "ok" for e in res["nodes"].values())
    assert {g["profile"] for g in res["groups"]} == {"b200", "h100"}


def test_failed_nodes_are_left_out_of_the_distribution():
    nodes = [gpu_node(f"n{i}") for i in range(4)] + [gpu_node(f"bad{i}", tflops=10.0, verdict="fail")
                                                     for i in range(4)]
    res = ev(sweep(nodes))
    assert set(res["nodes"]) == {"n0", "n1", "n2", "n3"} and all(e["level"] == "ok" for e in res["nodes"].values())


def test_baseline_from_an_evaluation_and_shares():
    nodes = [gpu_node(f"n{i}", tflops=1000.0 + i) for i in range(5)]
    res = ev(sweep(nodes))
    base = fleet.baseline_from(res)
    assert base["b200"]["stress-tflops"]["nodes"] == 5
    assert base["b200"]["stress-tflops"]["median"] == pytest.approx(1002.0)
    assert fleet.shares(res["nodes"]["n0"])["stress-tflops"] == pytest.approx(1000.0 / 1002.0, abs=1e-4)


def _site(extra: str) -> str:
    """site.example.toml with burnin.straggler keys set from `extra` (TOML lines)."""
    data = tomllib.loads(EXAMPLE.read_text())
    data["burnin"]["straggler"] = {**data["burnin"].get("straggler", {}), **tomllib.loads(extra)}
    return tomli_w.dumps(data)


@pytest.mark.parametrize("extra,expected", [
    ("warn_percent = 85.0\nfail_percent = 90.0", "fail_percent 90 must be below warn_percent 85"),
    ('metrics = ["stress-tflops", "ib-rate"]', "burnin.straggler.metrics"),
    ("min_nodes = 2", "burnin.straggler.min_nodes"),
    ("warn_percent = 120.0", "burnin.straggler.warn_percent"),
])
def test_site_section_errors_are_one_line(extra, expected):
    with pytest.raises(SiteError) as err:
        parse_site(_site(extra))
    lines = err.value.lines()
    assert any(expected in line and "burnin.straggler" in line for line in lines), lines
    assert all("\n" not in line for line in lines)


def test_site_section_defaults_and_settings():
    site = parse_site(_site("warn_percent = 95.0\nmin_nodes = 6"))
    s = fleet.Settings.from_site(site.burnin.straggler)
    assert parse_site(EXAMPLE.read_text()).burnin.straggler == type(site.burnin.straggler)()  # example = defaults
    assert (s.warn_percent, s.fail_percent, s.min_nodes, s.mad_k) == (95.0, 85.0, 6, 3.0)
    assert site.burnin.straggler.enabled and site.burnin.straggler.drain_after == 2


STRAGGLER = FIXTURE.with_name("sweep-straggler.json")


def test_a_recorded_dev_cluster_straggler_sweep_judges_the_same_again():
    """tests/fixtures/burnin/sweep-straggler.json: the summary of the second sweep of
    tests/integration/test_burnin_straggler.py (SLURMADM_RECORD_DIR), b200-003 with the stand-in
    straggler at 70%: real CPU stand-in rates and gloo all-reduces of four fake nodes."""
    s = json.loads(STRAGGLER.read_text())
    cfg = s["fleet"]["settings"]
    settings = fleet.Settings(cfg["warn_percent"], cfg["fail_percent"], cfg["min_nodes"], cfg["mad_k"],
                              tuple(sorted({g["metric"] for g in s["fleet"]["groups"]})))
    profile = {g["profile"] for g in s["fleet"]["groups"]}.pop()
    again = ev(s, profile=profile, settings=settings)
    recorded = {n["node"]: n["fleet"] for n in s["nodes"] if n.get("fleet")}
    assert {n: e["level"] for n, e in again["nodes"].items()} == {n: f["level"] for n, f in recorded.items()}
    assert [n for n, f in recorded.items() if f["level"] == "slow"] == ["b200-003"]
    slow = next(n for n in s["nodes"] if n["node"] == "b200-003")
    assert slow["action"] == "drained" and slow["reason"].startswith("slurmadm: burnin-straggler: stress-cpu ")
    share = recorded["b200-003"]["metrics"]["stress-cpu"]["share"]
    assert 0.1 < share < 0.5  # the stand-in's 70% slower, give or take the machine's noise


def test_an_hca_port_at_half_rate_makes_a_slow_node():
    def with_fabric(name, low):
        n = gpu_node(name)
        n["tests"].append({"test": "fabric", "status": "pass", "value": low, "unit": "Gb/s",
                           "data": {"per_hca": {f"mlx5_{i}": (low if i == 3 else 400.0) for i in range(8)}}})
        return n
    res = ev(sweep([with_fabric(f"n{i}", 400.0) for i in range(5)] + [with_fabric("hdr", 200.0)]))
    e = res["nodes"]["hdr"]
    assert e["level"] == "slow" and fleet.describe(e["worst"]) == "hca-rate 200 = 50% of fleet median 400"


# ------------------------------------------------------------------------------ HCA error counters


def with_counters(name, rise=None, hca="mlx5_3"):
    """A node whose fabric test recorded each HCA port's error-counter rise over the job, shaped
    as burnin.node.fabric_rates records it (data.counter_rise: hca -> counter -> rise)."""
    n = gpu_node(name)
    per = {f"mlx5_{i}": {"symbol_error": 0, "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0}
           for i in range(8)}
    per[hca].update(rise or {})
    n["tests"].append({"test": "fabric", "status": "pass", "value": 400.0, "unit": "Gb/s",
                       "data": {"per_hca": {h: 400.0 for h in per}, "port": 1, "counter_rise": per}})
    return n


def test_hca_error_counts_against_a_fleet_median_of_zero_use_the_floor():
    quiet = [with_counters(f"n{i}") for i in range(5)]
    res = ev(sweep(quiet + [with_counters("noisy", {"symbol_error": 240, "link_downed": 1}),
                            with_counters("few", {"symbol_error": 9, "port_rcv_errors": 3})]))
    noisy = res["nodes"]["noisy"]
    assert noisy["metrics"]["hca-symbol-errors"]["value"] == 240
    assert noisy["metrics"]["hca-symbol-errors"]["fleet"]["limit"] == fleet.COUNT_FLOORS["hca-symbol-errors"]
    assert noisy["metrics"]["hca-link-downed"]["level"] == "warn"
    # a warning, never slow: errors alone do not drain as a straggler (the infiniband check fails)
    assert noisy["level"] == "warn"
    assert fleet.describe(noisy["worst"]) == "hca-symbol-errors 240 in the burn-in, fleet median 0 (warns from 10)"
    # below the floor: a few errors in a quiet fleet are not singled out
    assert res["nodes"]["few"]["level"] == "ok"
    assert all(res["nodes"][f"n{i}"]["level"] == "ok" for i in range(5))
    # no share of a zero median: counts stay out of the shares (history, exporter, charts)
    assert "hca-symbol-errors" not in fleet.shares(noisy) and "hca-rate" in fleet.shares(noisy)


def test_hca_error_counts_in_a_fleet_that_always_sees_some():
    # every port sees ~30 symbol errors over the job: 2x the median (31.5 over all 8) is the allowance
    nodes = [with_counters(f"n{i}", {"symbol_error": 30 + i % 3}) for i in range(6)]
    res = ev(sweep(nodes + [with_counters("x", {"symbol_error": 55}), with_counters("y", {"symbol_error": 200})]))
    assert res["nodes"]["x"]["metrics"]["hca-symbol-errors"]["level"] == "ok"
    y = res["nodes"]["y"]["metrics"]["hca-symbol-errors"]["fleet"]
    assert y["level"] == "warn" and y["limit"] == pytest.approx(63.0) and y["share"] is None


def test_hca_error_counts_need_enough_nodes_and_a_clear_spread():
    few = ev(sweep([with_counters("a"), with_counters("b"), with_counters("c", {"link_downed": 4})]))
    assert few["nodes"]["c"]["metrics"]["hca-link-downed"]["level"] == "none"  # 3 < min_nodes
    s = fleet.Settings()
    m = fleet.METRICS["hca-rcv-errors"]
    # past 2x the median but within the fleet's own spread (3 robust deviations): not singled out
    assert fleet.judge(70.0, 30.0, 20.0, m, s)["level"] == "ok"
    assert fleet.judge(160.0, 30.0, 20.0, m, s)["level"] == "warn"


def test_hca_error_counts_against_the_baseline_and_the_report_has_no_chart_for_them():
    from slurmadm.burnin import report

    nodes = [with_counters(f"n{i}", {"port_rcv_errors": 50}) for i in range(5)]  # the whole fleet got noisy
    base = {"b200": {"hca-rcv-errors": {"median": 0.0, "mad": 0.0, "nodes": 5}}}
    res = ev(sweep(nodes), baselines=base)
    assert all(e["metrics"]["hca-rcv-errors"]["fleet"]["level"] == "ok" for e in res["nodes"].values())
    assert all(e["metrics"]["hca-rcv-errors"]["baseline"]["level"] == "warn" for e in res["nodes"].values())
    f = next(x for x in res["fleet"] if x["metric"] == "hca-rcv-errors")
    assert f["level"] == "warn" and f["share"] is None
    summary = {"nodes": [{**n, "fleet": res["nodes"][n["node"]]} for n in nodes],
               "fleet": {k: v for k, v in res.items() if k != "nodes"}}
    charts = {c["metric"] for c in report.dist_charts(summary)}
    assert "hca-rate" in charts  # a rate (median 400) is charted as shares
    assert not charts & {m for m, x in fleet.METRICS.items() if x.kind == "count"}


def test_one_throttled_or_hot_gpu_sets_its_nodes_clock_and_temperature():
    """gpu-clock is the node's lowest GPU SM clock under load, gpu-temp its hottest GPU: one GPU
    throttled to 1400 MHz (the other seven at the fleet's 1965) makes the node slow on the clock;
    one GPU at 80 C warns (108-115% of the fleet's 70), the node's other metrics stay ok."""
    fleet_nodes = [gpu_node(f"n{i}") for i in range(6)]
    odd = gpu_node("odd")
    odd["tests"][0]["data"]["per_gpu"]["6"]["sm_clock_mhz"] = 1400.0
    odd["tests"][0]["data"]["per_gpu"]["2"]["temp_c"] = 80.0
    e = ev(sweep(fleet_nodes + [odd]))["nodes"]["odd"]["metrics"]
    assert e["gpu-clock"]["value"] == 1400.0 and e["gpu-clock"]["level"] == "slow"
    assert e["gpu-temp"]["value"] == 80.0 and e["gpu-temp"]["level"] == "warn"
    assert e["stress-tflops"]["level"] == "ok" and e["thermal"]["level"] == "ok"
