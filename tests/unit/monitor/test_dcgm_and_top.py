"""The dcgm GPU source and `top`: the prolog's job files in dcgm-exporter's
--hpc-job-mapping-dir format (read back as its transformation/hpc.go reads them); the stand-in
dcgm-exporter serving the real capture (slurmadm/devcluster/data) with Hostname and hpc_job as
dcgm-exporter sets them; the node exporter leaving out what dcgm-exporter has; `jobs idle` and
`top` on dcgm-exporter's names; `top`'s colours, legend and empty tables."""

from __future__ import annotations

import os
import re
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from slurmadm import jobmap
from slurmadm.devcluster import dcgmfake
from slurmadm.exporter import dcgm
from slurmadm.exporter.head import Snapshot
from slurmadm.jobs import find
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.top import LEGEND, Frame, _util_style, build_frame, util_query

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


def _site(**monitor):
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"].update(monitor)
    return parse_site(tomli_w.dumps(data), source="t.toml")


def hpc_go_read(directory: Path) -> dict[str, list[str]]:
    """dcgm-exporter's reading of the mapping dir (hpc.go getGPUFiles/readFile): plain files whose
    name is an integer, every line a job id."""
    out = {}
    for f in directory.iterdir():
        if f.is_file() and re.fullmatch(r"[0-9]+", f.name):
            out[f.name] = f.read_text().splitlines()
    return out


def test_prolog_writes_and_epilog_removes_dcgm_hpc_job_files(tmp_path):
    d = tmp_path / "hpc"
    env = {"SLURM_JOB_ID": "101", "SLURM_JOB_GPUS": "0-3"}
    jobmap.record_dcgm(env, str(d), "prolog")
    jobmap.record_dcgm({"SLURM_JOB_ID": "102", "SLURM_JOB_GPUS": "3,4"}, str(d), "prolog")  # GPU 3 shared
    jobmap.record_dcgm(env, str(d), "prolog")  # a re-run adds nothing
    assert hpc_go_read(d) == {"0": ["101"], "1": ["101"], "2": ["101"], "3": ["101", "102"], "4": ["102"]}
    jobmap.record_dcgm({"SLURM_JOB_ID": "101"}, str(d), "epilog")  # the epilog scans every GPU file
    assert hpc_go_read(d) == {"3": ["102"], "4": ["102"]}
    assert not [n for n in os.listdir(d) if n.startswith(".gpu-")]  # no temporary left
    assert jobmap.record_dcgm({"SLURM_JOB_ID": "../x"}, str(d), "prolog") == "no job"


def test_the_health_hook_writes_the_dcgm_map_only_when_the_site_asks(tmp_path):
    from slurmadm.health.config import from_site

    plain = from_site(_site(), "b200-001", site_path="s", site_sha256="0" * 64)
    assert plain.dcgm_job_map_dir == ""
    on = from_site(_site(gpu_source="dcgm", dcgm_job_map_dir="/run/hpc/{node}"), "b200-001",
                   site_path="s", site_sha256="0" * 64)
    assert on.dcgm_job_map_dir == "/run/hpc/b200-001"


def test_the_stand_in_dcgm_exporter_serves_the_real_capture_with_node_and_jobs(tmp_path):
    (tmp_path / "b200-002").mkdir()
    (tmp_path / "b200-002" / "3").write_text("77\n78\n")
    text = dcgmfake.render(dcgmfake.FIXTURE.read_text(), "b200-002", str(tmp_path / "b200-002"))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    util = fams["DCGM_FI_DEV_GPU_UTIL"].samples
    assert {s.labels["Hostname"] for s in util} == {"b200-002"}
    assert {s.labels["modelName"] for s in util} == {"NVIDIA A800-SXM4-80GB"}
    jobs = sorted(s.labels.get("hpc_job", "") for s in util if s.labels["gpu"] == "3")
    assert jobs == ["77", "78"]  # one copy per job id, as hpc.go does
    assert all("hpc_job" not in s.labels for s in util if s.labels["gpu"] != "3")
    # every family slurmadm's dcgm-mode queries read is in the capture
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ROW_REMAP_FAILURE"):
        assert name in fams or name.removesuffix("_COUNTER") in fams, name
    assert set(dcgm.DCGM_DEFAULT) >= {n for n in fams}  # the capture is the default counters


def test_dcgm_mode_node_exporter_leaves_out_what_dcgm_has():
    from slurmadm.exporter.node import NodeCollector

    assert "slurmadm_gpu_utilization_percent" in dcgm.LEFT_OUT and "slurmadm_gpu_temperature_celsius" in dcgm.LEFT_OUT
    for kept in ("slurmadm_gpu_ecc_errors", "slurmadm_gpu_nvlink_errors", "slurmadm_gpu_xid_class_last",
                 "slurmadm_gpu_clock_event_active", "slurmadm_gpu_nvlink_links_active", "slurmadm_gpu_xid_fatal"):
        assert kept not in dcgm.LEFT_OUT, kept

    class Empty:
        def read(self):
            return []

    c = NodeCollector(node="n", gpus=Empty(), ib=Empty(), host=Empty(), health=Empty(), xids=Empty(),
                      job_map_dir="/nonexistent", cache_s=0, deadline_s=1, idle_util_percent=0, gpu_source="dcgm")
    assert c.left_out == dcgm.LEFT_OUT


class DcgmMetrics:
    """Prometheus answers for dcgm_queries: job 9 on b200-001 idle for 2 h (busy 3 h ago), job 10
    busy a minute ago."""

    def __init__(self, now):
        self.now, self.seen = now, []

    def query(self, expr):
        self.seen.append(expr)
        mk = lambda job, v: {"metric": {"Hostname": "b200-001", "hpc_job": job}, "value": [self.now, str(v)]}  # noqa
        if expr.startswith("min by (Hostname, hpc_job) (min_over_time(timestamp("):
            return [mk("9", self.now - 4 * 3600), mk("10", self.now - 4 * 3600)]
        if expr.startswith("max by (Hostname, hpc_job) (max_over_time(timestamp("):
            return [mk("9", self.now - 2 * 3600), mk("10", self.now - 60)]
        if expr.startswith("count by (Hostname, hpc_job)"):
            return [mk("9", 8), mk("10", 8)]
        if expr.startswith("avg by (hpc_job)"):
            return [{"metric": {"hpc_job": "9"}, "value": [0, "0"]}, {"metric": {"hpc_job": "10"}, "value": [0, "50"]}]
        return []


def test_jobs_idle_reads_dcgm_exporter_names_and_squeue_for_the_user():
    site = _site(gpu_source="dcgm", idle_minutes=60)
    m = DcgmMetrics(time.time())

    class Facts:
        def facts(self, ids):
            return {i: (True, "gpu", "RUNNING", "alice", "ml-llm") for i in ids}

    f = find(site, m, Facts())
    assert [j.job_id for j in f.jobs] == ["9"]
    j = f.jobs[0]
    assert (j.user, j.account, j.gpus, j.nodes) == ("alice", "ml-llm", 8, ["b200-001"])
    assert 119 <= j.idle_minutes <= 121
    assert all("slurmadm_gpu_job_idle_seconds" not in q for q in m.seen)
    assert any('DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}' in q for q in m.seen)


def test_top_asks_for_the_gpu_sources_names():
    assert util_query(_site()) == ("avg by (node) (slurmadm_gpu_utilization_percent)", "node")
    assert util_query(_site(gpu_source="dcgm")) == ("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "Hostname")


def test_top_colours_utilisation_only_on_allocated_nodes_with_a_legend_and_none_for_empty_tables():
    assert _util_style(0.0, "allocated") == "red" and _util_style(80.0, "mixed") == "green"
    assert _util_style(0.0, "idle") == "dim" and _util_style(0.0, "drained") == "dim" and _util_style(0.0, "down") == "dim"
    site = _site()
    nodes = [NodeInfo("b200-001", "IDLE", partitions=("gpu",), gres="gpu:b200:8")]
    frame = Frame(Snapshot(nodes, [], {}), {"b200-001": 0.0}, "", 0)
    console = Console(width=160, record=True, color_system="truecolor")
    console.print(build_frame(site, frame, width=160))
    text = console.export_text()
    assert LEGEND[:40] in text.replace("\n", " ")
    for title in ("drains", "queue", "projects near quota"):
        block = text.split(title, 1)[1]
        assert "none" in block.split("\n\n")[0] or "none" in block[:400], title
    html = console.export_html(inline_styles=True)
    assert "#800000" not in html and "color: #ff0000" not in html  # no red anywhere: an idle node at 0 %
