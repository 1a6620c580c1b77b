"""The generated alert rules: `promtool check rules` accepts them, and every rule has a
`promtool test rules` case (it fires on the series it is meant for, with the labels and summary
the webhook and people read, and stays quiet before or beside them). promtool is Debian's, as
installed by scripts/install-system-deps.sh."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from slurmadm.monitor import rules
from slurmadm.site import parse_site

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
N = {"node": "b200-001", "gpu": "0"}
DRAIN = {"slurmadm_action": "drain"}


def _site():
    return parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")


def sel(name: str, **labels: str) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


# rule -> (input series {selector: values}, firing eval time, labels beyond severity/source/cluster,
#          summary, quiet eval time). Rules with `for:` (monitor.flap_for, 2m by default) are quiet
#          while pending: the quiet time lies inside that window.
CASES: dict[str, tuple[dict[str, str], str, dict[str, str], str, str]] = {
    "GpuOverTemperature": ({sel("slurmadm_gpu_temperature_celsius", **N, jobid=""): "90x10",
                            sel("slurmadm_gpu_temperature_celsius", node="b200-002", gpu="1", jobid=""): "80x10"},
                           "6m", {**N, "severity": "warning"}, "b200-001 GPU0 above 85 C for 5m", "4m"),
    "GpuXidSeen": ({sel("slurmadm_gpu_xid_class_last", **N, uuid="u", **{"class": "hardware"}): "0 0 63 63 63 63 63",
                    sel("slurmadm_gpu_xid_class_last", node="b200-002", gpu="0", **{"class": "hardware"}): "0x6",
                    sel("slurmadm_gpu_xid_class_last", node="b200-002", gpu="0", **{"class": "application"}): "13x6"},
                   "5m", {**N, "severity": "warning"}, "b200-001 GPU0 logged XID 63 (a hardware note, no drain)", "3m"),
    "GpuXidApplication": ({sel("slurmadm_gpu_xid_class_last", **N, **{"class": "application"}): "0 31 31 31 31 31",
                           sel("slurmadm_gpu_xid_class_last", node="b200-002", gpu="0", **{"class": "drain"}): "79x6"},
                          "4m", {**N, "severity": "info"}, "b200-001 GPU0 logged XID 31 (an application error)", "2m"),
    "GpuXidFatal": ({sel("slurmadm_gpu_xid_class_last", **N, **{"class": "drain"}): "0 79 79",
                     sel("slurmadm_gpu_xid_class_last", node="b200-002", gpu="0", **{"class": "hardware"}): "63x3"},
                    "2m", {**N, "severity": "critical", **DRAIN},
                    "b200-001 GPU0: XID 79, one NVIDIA's catalog says to drain for", "0m"),
    "GpuEccUncorrected": ({sel("slurmadm_gpu_ecc_errors_total", **N, type="uncorrected", scope="volatile"): "0 0 2 2",
                           sel("slurmadm_gpu_ecc_errors_total", node="b200-002", gpu="0", type="corrected",
                               scope="volatile"): "500 900 2000 3000"},
                          "3m", {**N, "severity": "critical", **DRAIN}, "b200-001 GPU0: 2 uncorrected ECC errors", "1m"),
    "GpuRowRemapFailure": ({sel("slurmadm_gpu_row_remap_failure", **N): "0 1 1"}, "2m",
                           {**N, "severity": "critical", **DRAIN}, "b200-001 GPU0: row remapping failed", "0m"),
    "GpuNvlinkErrorsRising": ({sel("slurmadm_gpu_nvlink_errors_total", **N, counter="replay"): "0 0 0 5 5 5 5 5",
                               sel("slurmadm_gpu_nvlink_errors_total", node="b200-002", gpu="0",
                                   counter="replay"): "7x8"},
                              "6m", {**N, "severity": "warning"}, "b200-001 GPU0: NVLink errors rising (15m)", "4m"),
    "GpuNvlinkLinksInactive": ({sel("slurmadm_gpu_nvlink_links", **N): "18x6",
                                sel("slurmadm_gpu_nvlink_links_active", **N): "18 16 16 16 16 16",
                                sel("slurmadm_gpu_nvlink_links", node="b200-002", gpu="0"): "18x6",
                                sel("slurmadm_gpu_nvlink_links_active", node="b200-002", gpu="0"): "18x6"},
                               "4m", {**N, "severity": "critical"}, "b200-001 GPU0: 2 NVLink links inactive", "2m"),
    "GpuPcieReplayRising": ({sel("slurmadm_gpu_pcie_replay_total", **N): "0 0 0 1000 1000 1000 1000 1000"}, "6m",
                            {**N, "severity": "warning"}, "b200-001 GPU0: PCIe replays rising (15m)", "4m"),
    "GpuClockThrottled": ({sel("slurmadm_gpu_clock_event_active", **N, reason="hw_thermal_slowdown"): "0 1 1 1 1 1",
                           sel("slurmadm_gpu_clock_event_active", node="b200-002", gpu="0",
                               reason="sw_power_cap"): "1x6"},
                          "4m", {**N, "severity": "warning"},
                          "b200-001 GPU0: clocks held down by a thermal or power slowdown", "2m"),
    "GpuJobIdle": ({sel("slurmadm_gpu_job_idle_seconds", **N, jobid="42", user="alice", account="ml-llm"): "0+60x70",
                    sel("slurmadm_gpu_job_idle_seconds", node="b200-001", gpu="1", jobid="42", user="alice",
                        account="ml-llm"): "0+60x70"},
                   "65m", {"node": "b200-001", "jobid": "42", "user": "alice", "account": "ml-llm", "severity": "info"},
                   "job 42 (alice/ml-llm) keeps its GPUs on b200-001 idle for over 60 min", "30m"),
    "GpuUsedWithoutAllocation": ({sel("slurmadm_gpu_unallocated_in_use", **N): "0 1 1 1 1 1"}, "4m",
                                 {**N, "severity": "warning"},
                                 "b200-001 GPU0 is in use (processes or utilisation) but no job was allocated it",
                                 "2m"),
    "InfinibandLinkDown": ({sel("slurmadm_ib_port_up", node="b200-001", hca="mlx5_0", port="1"): "1 0 0 0 0 0",
                            sel("slurmadm_ib_port_up", node="b200-001", hca="mlx5_1", port="1"): "1x6"},
                           "4m", {"node": "b200-001", "hca": "mlx5_0", "port": "1", "severity": "critical", **DRAIN},
                           "b200-001 mlx5_0 port 1 is not ACTIVE/LinkUp", "2m"),
    "InfinibandErrorsRising": ({sel("slurmadm_ib_port_errors_total", node="b200-001", hca="mlx5_0", port="1",
                                    counter="symbol_error"): "0 0 0 3 3 3 3 3",
                                sel("slurmadm_ib_port_errors_total", node="b200-001", hca="mlx5_1", port="1",
                                    counter="port_xmit_discards"): "0 5 10 20 40 80 160 320"},
                               "6m", {"node": "b200-001", "hca": "mlx5_0", "port": "1", "severity": "warning"},
                               "b200-001 mlx5_0: InfiniBand errors rising (15m) or an error counter saturated", "4m"),
    "HealthCheckFailing": ({sel("slurmadm_health_check_failing", node="b200-001", check="xid"): "0 1 1 1 1 1"}, "4m",
                           {"node": "b200-001", "check": "xid", "severity": "warning"},
                           "b200-001: health check xid failing", "2m"),
    "NodeExporterDown": ({sel("up", job="slurmadm-node", instance="10.0.0.1:9410", node="b200-001"): "0x10",
                          sel("up", job="slurmadm-node", instance="10.0.0.2:9410", node="b200-002"): "1x10"},
                         "6m", {"job": "slurmadm-node", "instance": "10.0.0.1:9410", "node": "b200-001",
                                "severity": "warning"},
                         "b200-001: the slurmadm node exporter does not answer", "4m"),
    "NodeExporterAbsent": ({sel("up", job="something-else", instance="x:1"): "1x10"}, "6m",
                           {"job": "slurmadm-node", "severity": "warning"}, "no slurmadm-node target is scraped", "4m"),
    "ExporterSourceStale": ({sel("slurmadm_exporter_source_stale", job="slurmadm-node", node="b200-001", source="gpu",
                                 instance="x:1"): "1x10",
                             sel("slurmadm_exporter_source_stale", job="slurmadm-node", node="b200-001",
                                 source="host", instance="x:1"): "0x10"},
                            "6m", {"job": "slurmadm-node", "node": "b200-001", "source": "gpu", "severity": "warning"},
                            "slurmadm-node b200-001: source gpu stale (hung read?)", "4m"),
    "SlurmNodeDown": ({sel("slurmadm_node_state", node="b200-001", state="down", owner="", reason=""): "1x10",
                       sel("slurmadm_node_state", node="b200-002", state="idle", owner="", reason=""): "1x10"},
                      "3m", {"node": "b200-001", "severity": "critical"},
                      "b200-001: Slurm has the node DOWN or NOT_RESPONDING", "1m"),
    "HeadExporterDown": ({sel("up", job="slurmadm-head", instance="head:9411"): "0x10"}, "6m",
                         {"job": "slurmadm-head", "instance": "head:9411", "severity": "warning"},
                         "the slurmadm head exporter does not answer", "4m"),
    "PartitionDrainedGpusHigh": ({sel("slurmadm_partition_gpus", partition="gpu", status="idle"): "32 24 24 24 24",
                                  sel("slurmadm_partition_gpus", partition="gpu", status="drained"): "0 8 8 8 8",
                                  sel("slurmadm_partition_gpus", partition="debug", status="idle"): "31x5",
                                  sel("slurmadm_partition_gpus", partition="debug", status="drained"): "1x5"},
                                 "4m", {"partition": "gpu", "severity": "critical"},
                                 "partition gpu: over 10% of GPUs drained or down", "2m"),
    "ProjectAtQuota": ({sel("slurmadm_project_gpus_in_use", project="ml-llm"): "32x70",
                        sel("slurmadm_project_gpu_quota", project="ml-llm"): "32x70",
                        sel("slurmadm_project_gpus_in_use", project="bio-fold"): "8x70",
                        sel("slurmadm_project_gpu_quota", project="bio-fold"): "32x70"},
                       "61m", {"project": "ml-llm", "severity": "info"}, "project ml-llm at its GPU quota for 1h", "30m"),
    "FleetDrift": ({"slurmadm_fleet_drift_nodes": "0 3 3"}, "2m", {"severity": "warning"},
                   "3 nodes differ from the software baseline", "0m"),
    "StoreNodesSilent": ({"slurmadm_store_silent_nodes": "0 2 2"}, "2m", {"severity": "warning"},
                         "2 nodes have sent the central store nothing for over 15 min (a node down, or its "
                         "shipper failing)", "0m"),
    # node_exporter's names (host alerts); its scrape job monitor.host_job labels targets node=<name>
    "HostOomKill": ({sel("node_vmstat_oom_kill", job="node-exporter", instance="h1:9100", node="b200-001"): "0 0 1 1",
                     sel("node_vmstat_oom_kill", job="node-exporter", instance="h2:9100", node="b200-002"): "4x4"},
                    "3m", {"node": "b200-001", "severity": "warning"},
                    "b200-001: the kernel OOM killer ran (15m)", "1m"),
    "HostEdacUncorrectable": ({sel("node_edac_uncorrectable_errors_total", job="node-exporter", node="b200-001",
                                   controller="0"): "0 0 2 2",
                               sel("node_edac_correctable_errors_total", job="node-exporter", node="b200-002",
                                   controller="0"): "0 5 9 9"},
                              "3m", {"node": "b200-001", "severity": "critical"},
                              "b200-001: 2 uncorrectable host memory (EDAC) errors", "1m"),
    "HostFilesystemNearlyFull": (
        {sel("node_filesystem_avail_bytes", job="node-exporter", node="b200-001", mountpoint="/scratch",
             fstype="xfs", device="/dev/nvme0n1"): "50 5 5 5 5 5",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-001", mountpoint="/scratch",
             fstype="xfs", device="/dev/nvme0n1"): "100x6",
         sel("node_filesystem_avail_bytes", job="node-exporter", node="b200-001", mountpoint="/dev/shm",
             fstype="tmpfs", device="tmpfs"): "1x6",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-001", mountpoint="/dev/shm",
             fstype="tmpfs", device="tmpfs"): "100x6"},
        "4m", {"node": "b200-001", "mountpoint": "/scratch", "severity": "warning"},
        "b200-001 /scratch over 90% full", "2m"),
    "HostRequiredMountMissing": (
        {sel("node_filesystem_size_bytes", job="node-exporter", node="b200-001", mountpoint="/"): "1x6",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-001", mountpoint="/home"): "1x6",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-002", mountpoint="/"): "1x6",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-002", mountpoint="/home"): "1x6",
         sel("node_filesystem_size_bytes", job="node-exporter", node="b200-002", mountpoint="/scratch"): "1x6"},
        "4m", {"node": "b200-001", "mountpoint": "/scratch", "severity": "critical"},
        "b200-001: /scratch is not mounted", "1m"),
}

# burn-in stragglers (rules.burnin_rules): fires at burnin.straggler.drain_after (2) slow sweeps in a row
CASES["BurninStraggler"] = ({sel("slurmadm_burnin_slow_sweeps", node="b200-001"): "0 1 2 2",
                             sel("slurmadm_burnin_slow_sweeps", node="b200-002"): "1 1 1 1"},
                            "2m", {"node": "b200-001", "severity": "warning"},
                            "b200-001: slower than the fleet in 2 burn-in sweeps in a row (passes every check; "
                            "`slurmadm burnin history b200-001`)", "1m")

# a node held for the next sweep and idle (state drained) for 36 h (burnin.hold_alert_after_h):
# b200-001 held burnin-due from minute 1 (draining while its job ran, minute 1..9), drained from 10;
# b200-002 drained burnin-suspect for 30 h then re-tested (quiet); b200-003 drained by health (quiet)
_H = 36 * 60
CASES["BurninHoldStuck"] = (
    {sel("slurmadm_node_state", node="b200-001", state="draining", owner="slurmadm", reason="burnin-due"):
     "_ 1x8",
     sel("slurmadm_node_state", node="b200-001", state="drained", owner="slurmadm", reason="burnin-due"):
     f"_x9 1x{_H + 10}",
     sel("slurmadm_node_state", node="b200-002", state="drained", owner="slurmadm", reason="burnin-suspect"):
     f"1x{30 * 60} _x{_H}",
     sel("slurmadm_node_state", node="b200-003", state="drained", owner="slurmadm", reason="xid"): f"1x{_H + 20}"},
    f"{_H + 12}m", {"node": "b200-001", "reason": "burnin-due", "severity": "warning"},
    "b200-001: held for the next burn-in sweep (burnin-due) and idle for over 36 h: no sweep has tested it "
    "(`slurmadm burnin held`)", f"{_H + 8}m")


# issue 25: the hooks of b200-001 and b200-002 cannot load the site (b200-003's can again)
CASES["HealthEnforcementOff"] = (
    {sel("slurmadm_health_enforcement_off", node="b200-001", instance="a:9410"): "0 1 1",
     sel("slurmadm_health_enforcement_off", node="b200-002", instance="b:9410"): "0 1 1",
     sel("slurmadm_health_enforcement_off", node="b200-003", instance="c:9410"): "0 0 0"},
    "2m", {"severity": "critical"},
    "health enforcement off on 2 nodes: their health hooks cannot load the site (`slurmadm health status` names them)",
    "0m")


# issue 34: b200-001's oldest open incident opened 300000 s before the epoch (> 72 h at 2m);
# b200-002's at 0 (300 s in repair at 5m: quiet)
CASES["RepairTooLong"] = (
    {sel("slurmadm_repair_node_since_timestamp_seconds", node="b200-001"): "_ -300000 -300000",
     sel("slurmadm_repair_node_since_timestamp_seconds", node="b200-002"): "0 0 0"},
    "2m", {"node": "b200-001", "severity": "warning"},
    "b200-001: in repair for over 72 h (`slurmadm repair history b200-001`)", "0m")

# issue 36: one open LEAF incident (slurmadm/repair/leaf.py); a GPU incident alone is quiet
CASES["SuspectLeafSwitch"] = (
    {sel("slurmadm_repair_incidents", **{"class": "LEAF", "state": "open"}): "0 1 1",
     sel("slurmadm_repair_incidents", **{"class": "RESET_GPU", "state": "open"}): "1 1 1"},
    "2m", {"severity": "warning"},
    "1 suspect leaf switch(es): InfiniBand port faults on several nodes under one leaf "
    "(`slurmadm repair status`, `slurmadm report leaves`)", "0m")


# The dcgm GPU source (monitor.gpu_source = "dcgm"): the rules that read dcgm-exporter's names and
# labels, on series shaped as tests/fixtures/dcgm's real capture (gpu, UUID, Hostname, modelName;
# hpc_job from --hpc-job-mapping-dir). Every other rule is the same expression in both modes.
D = {"gpu": "1", "UUID": "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6", "modelName": "NVIDIA A800-SXM4-80GB",
     "Hostname": "b200-001"}
DN = {"Hostname": "b200-001", "node": "b200-001", "gpu": "1"}
DCGM_CASES: dict[str, tuple[dict[str, str], str, dict[str, str], str, str]] = {
    "GpuOverTemperature": ({sel("DCGM_FI_DEV_GPU_TEMP", **D): "90x10",
                            sel("DCGM_FI_DEV_GPU_TEMP", **{**D, "gpu": "2", "Hostname": "b200-002"}): "80x10"},
                           "6m", {**DN, "severity": "warning"}, "b200-001 GPU1 above 85 C for 5m", "4m"),
    "GpuRowRemapFailure": ({sel("DCGM_FI_DEV_ROW_REMAP_FAILURE", **D): "0 1 1"}, "2m",
                           {**DN, "severity": "critical", **DRAIN}, "b200-001 GPU1: row remapping failed", "0m"),
    "GpuPcieReplayRising": ({sel("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", **D): "0 0 0 1000 1000 1000 1000 1000",
                             sel("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", **{**D, "gpu": "2"}): "5x8"}, "6m",
                            {**DN, "severity": "warning"}, "b200-001 GPU1: PCIe replays rising (15m)", "4m"),
    "GpuJobIdle": ({sel("DCGM_FI_DEV_GPU_UTIL", **D, hpc_job="42"): "0x70",
                    sel("DCGM_FI_DEV_GPU_UTIL", **{**D, "gpu": "2"}, hpc_job="42"): "0x70",
                    sel("DCGM_FI_DEV_GPU_UTIL", **{**D, "gpu": "3"}, hpc_job="43"): "90x70",
                    sel("DCGM_FI_DEV_GPU_UTIL", **{**D, "gpu": "4"}): "0x70"},
                   "65m", {"Hostname": "b200-001", "node": "b200-001", "hpc_job": "42", "jobid": "42",
                           "severity": "info"},
                   "job 42 keeps its GPUs on b200-001 idle for over 60 min", "30m"),
    "DcgmExporterDown": ({sel("up", job="dcgm-exporter", instance="b200-001:9400", node="b200-001"): "0x10",
                          sel("up", job="dcgm-exporter", instance="b200-002:9400", node="b200-002"): "1x10"},
                         "6m", {"job": "dcgm-exporter", "instance": "b200-001:9400", "node": "b200-001",
                                "severity": "warning"}, "b200-001: dcgm-exporter does not answer", "4m"),
}


def _dcgm_site():
    import tomli_w

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"]["gpu_source"] = "dcgm"
    return parse_site(tomli_w.dumps(data), source="t.toml")


def _promtool_test(rules_path: Path, tmp_path: Path, site, name: str, case) -> None:
    series, at, labels, summary, quiet = case
    rule = next(r for r in rules.build(site) if r.name == name)
    annotations = rule.to_dict({}, runbook_base=site.monitor.runbook_base_url)["annotations"]
    test = {
        "rule_files": [str(rules_path)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [
                {"eval_time": at, "alertname": name,
                 "exp_alerts": [{"exp_labels": {**labels, "source": "slurmadm", "cluster": site.cluster.name},
                                 "exp_annotations": {**annotations, "summary": summary}}]},
                {"eval_time": quiet, "alertname": name, "exp_alerts": []},
            ],
        }],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test))
    p = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory) -> Path:
    assert shutil.which("promtool"), "promtool is missing: run scripts/install-system-deps.sh"
    path = tmp_path_factory.mktemp("rules") / "rules.yml"
    path.write_text(rules.render(_site()))
    return path


@pytest.fixture(scope="module")
def dcgm_rules_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules-dcgm.yml"
    path.write_text(rules.render(_dcgm_site()))
    return path


@pytest.mark.parametrize("mode", ["slurmadm", "dcgm"])
def test_promtool_check_rules_accepts_the_generated_rules(mode, rules_file, dcgm_rules_file):
    path, site = (rules_file, _site()) if mode == "slurmadm" else (dcgm_rules_file, _dcgm_site())
    p = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rules.build(site))} rules found" in p.stdout


def test_every_rule_has_a_promtool_test_case_in_both_gpu_sources():
    assert {r.name for r in rules.build(_site())} == set(CASES)
    slurmadm = {r.name: r.expr for r in rules.build(_site())}
    for r in rules.build(_dcgm_site()):
        assert r.name in DCGM_CASES or slurmadm.get(r.name) == r.expr, f"{r.name}: dcgm expression has no test"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_fires_with_its_labels_and_stays_quiet_otherwise(name, rules_file, tmp_path):
    _promtool_test(rules_file, tmp_path, _site(), name, CASES[name])


@pytest.mark.parametrize("name", sorted(DCGM_CASES))
def test_dcgm_rule_fires_on_dcgm_exporter_series(name, dcgm_rules_file, tmp_path):
    _promtool_test(dcgm_rules_file, tmp_path, _dcgm_site(), name, DCGM_CASES[name])


def test_a_saturated_error_counter_keeps_infiniband_errors_firing(rules_file, tmp_path):
    """symbol_error (16 bits) stopped at 65535: it no longer rises, the alert must not go quiet."""
    case = ({sel("slurmadm_ib_port_errors_total", node="b200-001", hca="mlx5_0", port="1",
                 counter="symbol_error"): "65535x40",
             sel("slurmadm_ib_port_saturated", node="b200-001", hca="mlx5_0", port="1",
                 counter="symbol_error"): "1x40",
             sel("slurmadm_ib_port_saturated", node="b200-001", hca="mlx5_0", port="1",
                 counter="port_xmit_data"): "0x40"},
            "30m", {"node": "b200-001", "hca": "mlx5_0", "port": "1", "severity": "warning"},
            "b200-001 mlx5_0: InfiniBand errors rising (15m) or an error counter saturated", "1m")
    _promtool_test(rules_file, tmp_path, _site(), "InfinibandErrorsRising", case)


def test_every_alert_has_a_runbook_with_its_sections_and_url():
    names = {r.name for site in (_site(), _dcgm_site()) for rel in (None, (26, 5)) for r in rules.build(site, rel)}
    for name in sorted(names):
        page = REPO / "docs" / "runbooks" / f"{name}.md"
        assert page.is_file(), f"{name}: no docs/runbooks/{name}.md"
        text = page.read_text()
        for section in ("## What it means", "## How to confirm", "## What slurmadm already did", "## What to do"):
            assert section in text, f"{page.name}: no {section!r}"
    doc = yaml.safe_load(rules.render(_site()))
    for r in (r for g in doc["groups"] for r in g["rules"]):
        assert r["annotations"]["runbook_url"].endswith(f"/{r['alert']}.md")
        assert r["annotations"]["description"] and r["labels"]["cluster"] == "b200"
    listed = {p.stem for p in (REPO / "docs" / "runbooks").glob("*.md")} - {"README"}
    assert listed == names, f"runbooks without an alert: {sorted(listed - names)}"


def test_application_xids_do_not_page_as_hardware():
    """NVIDIA's catalog classes 13, 31, 43 as application errors: info, never the warning/critical
    hardware rules; 79 (fallen off the bus) is a drain."""
    from slurmadm.exporter.node import XID_CLASSES
    from slurmadm.health.xid import classify

    klass = {v: k for k, vs in XID_CLASSES.items() for v in vs}
    assert [klass[classify(x)[2]] for x in (13, 31, 43)] == ["application"] * 3
    assert klass[classify(79)[2]] == "drain" and klass[classify(63)[2]] == "hardware"
    by = {r.name: r for r in rules.build(_site())}
    assert by["GpuXidApplication"].severity == "info" and 'class="application"' in by["GpuXidApplication"].expr
    assert 'class="hardware"' in by["GpuXidSeen"].expr


def test_alerts_that_can_flap_wait_before_firing():
    by = {r.name: r for r in rules.build(_site())}
    for name in ("GpuXidSeen", "HealthCheckFailing", "PartitionDrainedGpusHigh", "GpuNvlinkErrorsRising",
                 "GpuPcieReplayRising", "InfinibandErrorsRising", "InfinibandLinkDown", "SlurmNodeDown"):
        assert by[name].for_ == _site().monitor.flap_for, name


def test_thresholds_and_actions_come_from_the_site():
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["monitor"] = {"gpu_temp_c": 80, "gpu_temp_for": "2m", "actions": {"GpuOverTemperature": "drain"}}
    import tomli_w

    site = parse_site(tomli_w.dumps(data), source="t.toml")
    doc = yaml.safe_load(rules.render(site))
    by_name = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    assert by_name["GpuOverTemperature"]["expr"].endswith("> 80")
    assert by_name["GpuOverTemperature"]["for"] == "2m"
    assert by_name["GpuOverTemperature"]["labels"]["slurmadm_action"] == "drain"
    assert "slurmadm_action" not in by_name["GpuXidFatal"]["labels"]  # the site's map replaces the default


def test_bad_monitor_settings_are_one_line_site_errors():
    from slurmadm.errors import SiteError

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    import tomli_w

    data["monitor"] = {"gpu_temp_for": "5 minutes", "actions": {"GpuXidFatal": "reboot"}}
    with pytest.raises(SiteError) as exc:
        parse_site(tomli_w.dumps(data), source="t.toml")
    lines = exc.value.lines()
    assert any("monitor.gpu_temp_for" in line for line in lines)
    assert any("monitor.actions.GpuXidFatal" in line for line in lines)


def test_a_check_in_observe_mode_pages_nobody(tmp_path):
    """A check tried on the fleet before it may drain (on_fail = "observe") fails on every node it
    would wrongly drain: HealthCheckFailing stays quiet for it and still fires for the others."""
    import tomli_w

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["health"].setdefault("checks", {})["pcie-link"] = {"on_fail": "observe"}
    data["health"]["checks"]["clock-events"] = {"on_fail": "observe"}
    site = parse_site(tomli_w.dumps(data), source="t.toml")
    assert site.health.observed() == ["clock-events", "pcie-link"]
    path = tmp_path / "rules.yml"
    path.write_text(rules.render(site))
    series = {sel("slurmadm_health_check_failing", node="b200-001", check="pcie-link"): "1x6",
              sel("slurmadm_health_check_failing", node="b200-002", check="clock-events"): "1x6",
              sel("slurmadm_health_check_failing", node="b200-003", check="xid"): "0 1 1 1 1 1"}
    _promtool_test(path, tmp_path, site, "HealthCheckFailing",
                   (series, "4m", {"node": "b200-003", "check": "xid", "severity": "warning"},
                    "b200-003: health check xid failing", "2m"))
    # promoted (back to its default), the same failure pages again
    assert "check!~" not in next(r.expr for r in rules.build(_site()) if r.name == "HealthCheckFailing")
