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


# rule -> (input series {selector: values}, firing eval time, labels beyond severity/source,
#          summary, quiet eval time)
CASES: dict[str, tuple[dict[str, str], str, dict[str, str], str, str]] = {
    "GpuOverTemperature": ({sel("slurmadm_gpu_temperature_celsius", **N, jobid=""): "90x10",
                            sel("slurmadm_gpu_temperature_celsius", node="b200-002", gpu="1", jobid=""): "80x10"},
                           "6m", {**N, "severity": "warning"}, "b200-001 GPU0 above 85 C for 5m", "4m"),
    "GpuXidSeen": ({sel("slurmadm_gpu_last_xid", **N, uuid="u"): "0 0 79 79"}, "3m", {**N, "severity": "warning"},
                   "b200-001 GPU0 logged XID 79", "1m"),
    "GpuXidFatal": ({sel("slurmadm_gpu_xid_fatal", **N): "0 1 1"}, "2m", {**N, "severity": "critical", **DRAIN},
                    "b200-001 GPU0: an XID NVIDIA's catalog says to drain for", "0m"),
    "GpuEccUncorrected": ({sel("slurmadm_gpu_ecc_errors_total", **N, type="uncorrected", scope="volatile"): "0 0 2 2",
                           sel("slurmadm_gpu_ecc_errors_total", node="b200-002", gpu="0", type="corrected",
                               scope="volatile"): "500 900 2000 3000"},
                          "3m", {**N, "severity": "critical", **DRAIN}, "b200-001 GPU0: 2 uncorrected ECC errors", "1m"),
    "GpuRowRemapFailure": ({sel("slurmadm_gpu_row_remap_failure", **N): "0 1 1"}, "2m",
                           {**N, "severity": "critical", **DRAIN}, "b200-001 GPU0: row remapping failed", "0m"),
    "GpuNvlinkErrorsRising": ({sel("slurmadm_gpu_nvlink_errors_total", **N, counter="replay"): "0 0 0 5 5",
                               sel("slurmadm_gpu_nvlink_errors_total", node="b200-002", gpu="0",
                                   counter="replay"): "7x5"},
                              "4m", {**N, "severity": "warning"}, "b200-001 GPU0: NVLink errors rising (15m)", "2m"),
    "GpuPcieReplayRising": ({sel("slurmadm_gpu_pcie_replay_total", **N): "0 0 0 1000 1000"}, "4m",
                            {**N, "severity": "warning"}, "b200-001 GPU0: PCIe replays rising (15m)", "2m"),
    "GpuJobIdle": ({sel("slurmadm_gpu_job_idle_seconds", **N, jobid="42", user="alice", account="ml-llm"): "0+60x70",
                    sel("slurmadm_gpu_job_idle_seconds", node="b200-001", gpu="1", jobid="42", user="alice",
                        account="ml-llm"): "0+60x70"},
                   "65m", {"node": "b200-001", "jobid": "42", "user": "alice", "account": "ml-llm", "severity": "info"},
                   "job 42 (alice/ml-llm) keeps its GPUs on b200-001 idle for over 60 min", "30m"),
    "GpuUsedWithoutAllocation": ({sel("slurmadm_gpu_unallocated_in_use", **N): "0 1 1"}, "2m",
                                 {**N, "severity": "warning"},
                                 "b200-001 GPU0 is in use (processes or utilisation) but no job was allocated it",
                                 "0m"),
    "InfinibandLinkDown": ({sel("slurmadm_ib_port_up", node="b200-001", hca="mlx5_0", port="1"): "1 0 0",
                            sel("slurmadm_ib_port_up", node="b200-001", hca="mlx5_1", port="1"): "1 1 1"},
                           "2m", {"node": "b200-001", "hca": "mlx5_0", "port": "1", "severity": "critical", **DRAIN},
                           "b200-001 mlx5_0 port 1 is not ACTIVE/LinkUp", "0m"),
    "InfinibandErrorsRising": ({sel("slurmadm_ib_port_errors_total", node="b200-001", hca="mlx5_0", port="1",
                                    counter="symbol_error"): "0 0 0 3 3",
                                sel("slurmadm_ib_port_errors_total", node="b200-001", hca="mlx5_1", port="1",
                                    counter="port_xmit_discards"): "0 5 10 20 40"},
                               "4m", {"node": "b200-001", "hca": "mlx5_0", "port": "1", "severity": "warning"},
                               "b200-001 mlx5_0: InfiniBand errors rising (15m)", "2m"),
    "HealthCheckFailing": ({sel("slurmadm_health_check_failing", node="b200-001", check="xid"): "0 1 1"}, "2m",
                           {"node": "b200-001", "check": "xid", "severity": "warning"},
                           "b200-001: health check xid failing", "0m"),
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
    "HeadExporterDown": ({sel("up", job="slurmadm-head", instance="head:9411"): "0x10"}, "6m",
                         {"job": "slurmadm-head", "instance": "head:9411", "severity": "warning"},
                         "the slurmadm head exporter does not answer", "4m"),
    "PartitionDrainedGpusHigh": ({sel("slurmadm_partition_gpus", partition="gpu", status="idle"): "32 24",
                                  sel("slurmadm_partition_gpus", partition="gpu", status="drained"): "0 8",
                                  sel("slurmadm_partition_gpus", partition="debug", status="idle"): "31 31",
                                  sel("slurmadm_partition_gpus", partition="debug", status="drained"): "1 1"},
                                 "1m", {"partition": "gpu", "severity": "critical"},
                                 "partition gpu: over 10% of GPUs drained or down", "0m"),
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
}

# burn-in stragglers (rules.burnin_rules): fires at burnin.straggler.drain_after (2) slow sweeps in a row
CASES["BurninStraggler"] = ({sel("slurmadm_burnin_slow_sweeps", node="b200-001"): "0 1 2 2",
                             sel("slurmadm_burnin_slow_sweeps", node="b200-002"): "1 1 1 1"},
                            "2m", {"node": "b200-001", "severity": "warning"},
                            "b200-001: slower than the fleet in 2 burn-in sweeps in a row (passes every check; "
                            "`slurmadm burnin history b200-001`)", "1m")


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory) -> Path:
    assert shutil.which("promtool"), "promtool is missing: run scripts/install-system-deps.sh"
    path = tmp_path_factory.mktemp("rules") / "rules.yml"
    path.write_text(rules.render(_site()))
    return path


def test_promtool_check_rules_accepts_the_generated_rules(rules_file):
    p = subprocess.run(["promtool", "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"SUCCESS: {len(rules.build(_site()))} rules found" in p.stdout


def test_every_rule_has_a_promtool_test_case():
    assert {r.name for r in rules.build(_site())} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_fires_with_its_labels_and_stays_quiet_otherwise(name, rules_file, tmp_path):
    series, at, labels, summary, quiet = CASES[name]
    test = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [
                {"eval_time": at, "alertname": name,
                 "exp_alerts": [{"exp_labels": {**labels, "source": "slurmadm"},
                                 "exp_annotations": {"summary": summary}}]},
                {"eval_time": quiet, "alertname": name, "exp_alerts": []},
            ],
        }],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test))
    p = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


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
