"""The exporters' text exposition (slurmadm.exporter.exposition) is byte for byte what
prometheus_client's generate_latest writes: on the head collector over real Slurm output, on
hostile label values, and on families it hands back to generate_latest."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurmadm.exporter.exposition import render
from slurmadm.exporter.head import HeadCollector, Snapshot, parse_squeue
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.slurm.parse import nodes_from_json

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures" / "slurm"


class Fixed:
    def __init__(self, snap):
        self.snap = snap

    def read(self):
        return self.snap


def head_registry(nodes, jobs) -> CollectorRegistry:
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadCollector(site=site, source=Fixed(Snapshot(nodes, jobs, {"ml-llm": 600.0})), cache_s=60,
                               deadline_s=5))
    return reg


class Frozen:
    """One collection of a registry, rendered twice (ages and durations change between collections)."""

    def __init__(self, reg):
        self.metrics = list(reg.collect())

    def collect(self):
        return self.metrics


def test_the_head_collector_on_real_output_renders_as_generate_latest():
    for release, nodes_file in (("22.05", "sinfo.json"), ("24.11", "scontrol-show-node.json")):
        nodes = nodes_from_json((FIX / release / nodes_file).read_text(), "fixture")
        reg = head_registry(nodes, parse_squeue((FIX / "22.05" / "squeue-O-monitor.txt").read_text()))
        once = Frozen(reg)
        ours = render(once)
        assert b'slurmadm_node_state{node="b200-003"' in ours
        assert ours == generate_latest(once)


def test_hostile_label_values_and_mixed_families_render_as_generate_latest():
    evil = 'admin: "quoted" back\\slash\nnew line {x="y"}'
    nodes = [NodeInfo(name="b200-001", state="IDLE", flags=frozenset({"DRAIN"}), reason=evil, gres="gpu:b200:8",
                      partitions=("gpu",)),
             NodeInfo(name="b200-002", state="MIXED", gres="gpu:b200:8", partitions=("gpu", "debug"))]

    class Mixed:
        def collect(self):
            g = GaugeMetricFamily("t_gauge", 'help with "quotes" and \\ and\nnewline', labels=["b", "a"])
            g.add_metric(["2", evil], 1.5)
            g.add_metric(["1", ""], float("inf"))
            yield g
            c = CounterMetricFamily("t_errors", "a counter", labels=["kind"])
            c.add_metric(["x"], 3)
            yield c
            u = GaugeMetricFamily("t_plain", "no labels")
            u.add_metric([], 1e21)
            yield u
            v = Metric("t_varying", "label sets that differ between samples", "gauge")
            v.add_sample("t_varying", {"a": "1"}, 1)
            v.add_sample("t_varying", {"b": "2", "a": "3"}, 2)
            v.add_sample("t_varying", {"c": "4"}, 3)
            yield v

    reg = head_registry(nodes, [])
    reg.register(Mixed())
    once = Frozen(reg)
    ours = render(once)
    assert ours == generate_latest(once)
    fams = {f.name: f for f in text_string_to_metric_families(ours.decode())}
    assert fams["t_gauge"].samples[0].labels["a"] == evil  # escaped and read back intact
    assert [s.labels["node"] for s in fams["slurmadm_node_state"].samples] == ["b200-001", "b200-002"]


def test_families_it_does_not_write_go_through_generate_latest():
    reg = CollectorRegistry()
    h = Histogram("t_seconds", "a histogram", registry=reg)
    h.observe(0.3)
    g = GaugeMetricFamily("t_gauge", "a gauge", labels=["x"])
    g.add_metric(["1"], 2)

    class One:
        def collect(self):
            yield g
    reg.register(One())
    ours = render(reg)
    assert b"t_seconds_bucket{" in ours and b't_gauge{x="1"} 2.0' in ours
    # _created holds the wall clock of the histogram's creation: equal across both renders
    assert ours == generate_latest(reg)
