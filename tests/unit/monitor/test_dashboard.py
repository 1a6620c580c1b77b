"""The dashboard as grafana-foundation-sdk builds it: the SDK's own models read the JSON back
unchanged; cluster/partition/node variables and the fleet -> partition -> node rows; a unit and
thresholds on every panel; no `format: heatmap` (a histogram-bucket format) anywhere; CPU,
memory, GPU memory, power and InfiniBand panels per partition; in the dcgm GPU source the GPU
panels read dcgm-exporter's names. promtool parses every query of both sources (the integration
tests run them against the dev Prometheus)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w
import yaml

from slurmadm.monitor import dashboard
from slurmadm.site import parse_site

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


def _site(**monitor):
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"].update(monitor)
    return parse_site(tomli_w.dumps(data), source="t.toml")


@pytest.fixture(params=["slurmadm", "dcgm"])
def site(request):
    return _site(gpu_source=request.param)


def test_the_sdk_models_read_the_dashboard_back_unchanged(site):
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    d = dashboard.to_dict(site)
    again = json.loads(json.dumps(Dashboard.from_json(d), cls=JSONEncoder))
    assert again == d


def test_variables_and_the_drill_down_rows(site):
    d = dashboard.to_dict(site)
    names = [v["name"] for v in d["templating"]["list"]]
    assert names[:4] == ["datasource", "cluster", "partition", "node"]
    by = {v["name"]: v for v in d["templating"]["list"]}
    assert "$cluster" in by["partition"]["query"] and "$partition" in by["node"]["query"]
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Repair", "Fault cost", "Partition $partition", "Node $node"]


def test_every_panel_has_a_unit_and_thresholds_and_no_heatmap_format(site):
    d = dashboard.to_dict(site)
    panels = [p for p in d["panels"] if p["type"] != "row"]
    for p in panels:
        defaults = p["fieldConfig"]["defaults"]
        assert defaults.get("unit"), p["title"]
        steps = defaults["thresholds"]["steps"]
        assert steps and steps[0]["value"] is None, p["title"]
        for t in p["targets"]:
            assert t.get("format") != "heatmap", p["title"]
    heat = [p for p in panels if p["type"] == "heatmap"]
    assert heat and all(p["options"]["calculate"] is True for p in heat)


def test_per_partition_panels_for_cpu_memory_gpu_memory_power_and_infiniband(site):
    titles = {p["title"] for p in dashboard.to_dict(site)["panels"]}
    for t in ("CPU busy per partition", "Memory used per partition", "GPU memory used per partition",
              "GPU power per partition", "InfiniBand throughput per partition", "InfiniBand / RoCE port throughput",
              "InfiniBand transmit wait (congestion)"):
        assert t in titles, t


def test_the_gpu_source_decides_the_gpu_series():
    slurmadm = " ".join(e for _t, e in dashboard.panel_queries(_site()))
    dcgm = " ".join(e for _t, e in dashboard.panel_queries(_site(gpu_source="dcgm")))
    assert "slurmadm_gpu_utilization_percent" in slurmadm and "DCGM_FI_DEV_GPU_UTIL" not in slurmadm
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED",
                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 'Hostname=~".*"'):
        assert name in dcgm, name
    for name in ("slurmadm_gpu_utilization_percent", "slurmadm_gpu_temperature_celsius", "slurmadm_gpu_power_watts",
                 "slurmadm_gpu_memory_used_bytes", "slurmadm_gpu_pcie_replay_total"):
        assert name not in dcgm, name


def test_promtool_parses_every_query_of_both_sources(site, tmp_path):
    rules = [{"record": f"slurmadm:panel_{i}", "expr": e} for i, (_t, e) in enumerate(dashboard.panel_queries(site))]
    f = tmp_path / "panels.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    p = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
