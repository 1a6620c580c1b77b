"""The site model refuses bad files with one line per problem naming the key path (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.errors import SiteError
from slurmadm.site import load_site, parse_site
from tests.unit.siteedit import DELETE, EXAMPLE, edited, put

pytestmark = pytest.mark.unit


MINIMAL = """
[cluster]
name = "mini"
controllers = ["head"]

[database]
host = "head"

[[nodes]]
names = "b200-[001-004]"

[[partitions]]
name = "gpu"
default = true
"""


def test_example_site_is_valid_and_describes_the_reference_cluster():
    site = load_site(EXAMPLE)
    assert site.cluster.name == "b200"
    assert len(site.node_names) == 128 and site.node_names[0] == "b200-001" and site.node_names[-1] == "b200-128"
    assert site.total_gpus == 1024
    prof = site.node_profile("b200-077")
    assert (prof.sockets, prof.cores_per_socket, prof.threads_per_core, prof.cpus) == (2, 56, 2, 224)
    assert prof.memory_gib == 2048
    assert prof.gpus.count == 8 and prof.gpus.sockets == [0, 0, 0, 0, 1, 1, 1, 1]
    assert prof.nics.count == 8 and prof.nics.gbps == 400
    assert [(n, len(m)) for n, m in site.scalable_units] == [("su1", 32), ("su2", 32), ("su3", 32), ("su4", 32)]
    assert {q.name for q in site.qos} >= {"normal", "high", "low", "debug", "burnin"}
    assert site.default_partition.name == "gpu"


def uncommented_keys(text: str) -> list[str]:
    """The first occurrence of every (table, key) must carry a comment: inline, or in the comment
    block right above it. Table headers likewise (the first of each [[array]] is enough)."""
    lines = text.splitlines()
    seen: set[tuple[str, str]] = set()
    table = ""
    missing = []

    def comment_above(i: int) -> bool:
        return i > 0 and lines[i - 1].strip().startswith("#")

    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            table = line.split("#")[0].strip().strip("[]")
            ident = ("<table>", table)
            key_text = line
        else:
            ident = (table, line.split("=")[0].strip())
            key_text = f"{table}.{ident[1]}"
        if ident in seen:
            continue
        seen.add(ident)
        if "#" not in line and not comment_above(i):
            missing.append(f"line {i + 1}: {key_text}")
    return missing


def test_every_key_of_the_example_is_commented():
    assert uncommented_keys(EXAMPLE.read_text()) == []


def test_minimal_site_gets_builtin_profile_and_defaults():
    site = parse_site(MINIMAL)
    assert site.node_profile("b200-002").gpus.model == "b200"
    assert site.total_gpus == 32
    assert [n for n, _ in site.scalable_units] == ["su1"]


BAD_SITES = [
    # (id, TOML text or mutation, substring the error line must contain)
    ("toml-syntax", "[cluster\nname = 'x'", "TOML syntax error"),
    ("missing-cluster", MINIMAL.replace('[cluster]\nname = "mini"\ncontrollers = ["head"]\n', ""), "cluster: required key is missing"),
    ("unknown-top-key", MINIMAL + "\n[clustre]\nname='x'\n", "clustre: unknown key"),
    ("typo-key-suggestion", put("nodes.0.profil", "hgx-b200"), "nodes[0].profil: unknown key (did you mean 'profile'?)"),
    ("wrong-type-name", put("cluster.name", 12), "cluster.name: expected a string, got 12"),
    ("bad-cluster-name", put("cluster.name", "B200 Cluster"), "cluster.name: 'B200 Cluster' is not allowed"),
    ("no-controllers", put("cluster.controllers", []), "cluster.controllers"),
    ("zero-gpus", put("profiles.hgx-b200.gpus.count", 0), "profiles.hgx-b200.gpus.count: must be >= 1, got 0"),
    ("gpu-sockets-length", put("profiles.hgx-b200.gpus.sockets", [0, 1]), "sockets lists 2 GPUs but count is 8"),
    ("gpu-socket-missing", put("profiles.hgx-b200.gpus.sockets", [0, 0, 0, 0, 2, 2, 2, 2]), "names socket 2 but the profile has 2 sockets"),
    ("device-files-count", put("profiles.hgx-b200.gpus.device_files", "/dev/nvidia[0-3]"), "names 4 files but count is 8"),
    ("undefined-profile", put("nodes.0.profile", "hgx-b300"), "nodes[0].profile: 'hgx-b300' is not a defined profile"),
    ("bad-hostlist", put("nodes.0.names", "b200-[001-"), "nodes[0].names: 'b200-[001-' is not a valid hostlist"),
    ("overlapping-nodes", lambda d: d["nodes"].append({"names": "b200-[120-140]"}), "nodes[1].names: 'b200-[120-140]' overlaps"),
    ("partition-outside-nodes", put("partitions.1.nodes", "b200-[120-140]"), "partitions[1].nodes: 'b200-[120-140]' is outside nodes"),
    ("two-default-partitions", put("partitions.1.default", True), "partitions[1].default: only one partition can be the default"),
    ("duplicate-partition", put("partitions.1.name", "gpu"), "partition 'gpu' is defined twice"),
    ("bad-max-time", put("partitions.0.max_time", "7 days"), "partitions[0].max_time: '7 days' is not allowed"),
    ("partition-undefined-qos", put("partitions.1.qos", "urgent"), "partitions[1].qos: QOS 'urgent' is not defined"),
    ("quota-above-cluster", put("projects.1.gpu_quota", 2048), "projects[1].gpu_quota: 2048 GPUs is above the cluster's 1024 GPUs"),
    ("undefined-organization", put("projects.1.organization", "chemistry"), "projects[1].organization: 'chemistry' is not a defined organization"),
    ("undefined-default-qos", put("projects.1.default_qos", "urgent"), "projects[1].default_qos: QOS 'urgent' is not defined"),
    ("duplicate-account", put("projects.2.name", "phys-lattice"), "account name 'phys-lattice' is used twice"),
    ("bad-fairshare", put("projects.1.fairshare", "paren"), "projects[1].fairshare: got 'paren', expected an integer or 'parent'"),
    ("bad-user-name", put("projects.1.members", ["Alice Smith"]), "projects[1].members[0]: 'Alice Smith' is not allowed"),
    ("duplicate-member", put("projects.1.members", ["alice", "alice"]), "projects[1].members: user 'alice' is listed twice"),
    ("qos-preempts-undefined", put("qos.1.preempt", ["scavenger"]), "qos[1].preempt[0]: QOS 'scavenger' is not defined"),
    ("qos-preempts-itself", put("qos.1.preempt", ["high"]), "qos[1].preempt[0]: QOS 'high' cannot preempt itself"),
    ("bad-qos-flag", put("qos.0.flags", ["DenyOnLimits"]), "qos[0].flags[0]: got 'DenyOnLimits'"),
    ("unit-outside-nodes", put("topology.units.3.nodes", "b200-[097-130]"), "topology.units[3].nodes: 'b200-[097-130]' is outside nodes"),
    ("unit-overlap", put("topology.units.1.nodes", "b200-[030-064]"), "topology.units[1].nodes: b200-[030-032] already belong to another unit"),
    ("node-in-no-unit", put("topology.units.3.nodes", "b200-[097-127]"), "topology.units: nodes b200-128 are in no scalable unit"),
    ("memory-fraction", put("slurm.real_memory_fraction", 1.5), "slurm.real_memory_fraction: must be <= 1.0, got 1.5"),
    ("memory-fraction-nan", put("slurm.real_memory_fraction", float("nan")), "slurm.real_memory_fraction: must be a number, got nan"),
    ("drain-cap-nan", put("health.drain_cap_fraction", float("nan")), "health.drain_cap_fraction: must be a number, got nan"),
    ("burnin-undefined-qos", put("burnin.qos", "nightly"), "burnin.qos: QOS 'nightly' is not defined"),
    ("burnin-window", put("burnin.window_start", "25:00"), "burnin.window_start: '25:00' is not allowed"),
    ("burnin-zero-stress", put("burnin.stress_seconds", 0), "burnin.stress_seconds: must be >= 1, got 0"),
    ("bmc-pattern", put("bmc.host_pattern", "bmc-01"), "bmc.host_pattern: 'bmc-01' is not allowed"),
    ("relative-store-path", put("store.path", "slurmadm.db"), "store.path: 'slurmadm.db' is not an absolute path"),
    ("negative-threshold", put("health.models.b200.max_gpu_temp_c", -5), "health.models.b200.max_gpu_temp_c: must be > 0, got -5"),
    ("missing-database-host", put("database.host", DELETE), "database.host: required key is missing"),
]


@pytest.mark.parametrize("case", BAD_SITES, ids=[c[0] for c in BAD_SITES])
def test_bad_site_is_refused_with_key_path(case, tmp_path):
    _, spec, expected = case
    text = spec if isinstance(spec, str) else edited(spec)
    path = tmp_path / "site.toml"
    path.write_text(text)
    with pytest.raises(SiteError) as err:
        load_site(path)
    lines = err.value.lines()
    assert any(expected in line for line in lines), lines
    assert all(line.startswith(str(path)) and "\n" not in line for line in lines)

    result = CliRunner().invoke(cli, ["site", "validate", "--site", str(path)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert expected in result.output


def test_at_least_twenty_distinct_bad_files():
    assert len({c[0] for c in BAD_SITES}) >= 20


def test_site_file_resolution(tmp_path, monkeypatch):
    path = tmp_path / "s.toml"
    path.write_text(MINIMAL)
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    assert load_site().cluster.name == "mini"
    monkeypatch.delenv("SLURMADM_SITE")
    result = CliRunner().invoke(cli, ["site", "validate"])  # /etc/slurmadm/site.toml absent here
    if not Path("/etc/slurmadm/site.toml").exists():
        assert result.exit_code == 2
        assert "site file /etc/slurmadm/site.toml does not exist" in result.output


def test_validate_json(tmp_path):
    result = CliRunner().invoke(cli, ["site", "validate", "--site", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    assert data["nodes"] == 128 and data["gpus"] == 1024 and data["valid"] is True
    assert data["node_list"] == "b200-[001-128]"


def test_undecodable_byte_is_one_line_not_a_traceback(tmp_path):
    """issue 15: one non-UTF-8 byte gave a UnicodeDecodeError traceback (exit 1)."""
    bad = tmp_path / "site.toml"
    bad.write_bytes(MINIMAL.encode().replace(b'name = "mini"', b'name = "mi\xffni"'))
    with pytest.raises(SiteError, match=r"not UTF-8: byte 0xff at line 3"):
        load_site(bad)
    result = CliRunner().invoke(cli, ["site", "validate", "--site", str(bad)])
    assert result.exit_code == 2
    assert "not UTF-8: byte 0xff at line 3" in result.output and "Traceback" not in result.output
