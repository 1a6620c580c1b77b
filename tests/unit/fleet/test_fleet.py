"""Fact parsers on real outputs (tests/fixtures/fleet/README.md names the sources), the collector
script run for real by /bin/sh, drift grouping, clush-style folding, drift drain decisions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurmadm.errors import UsageError
from slurmadm.fleet import MISSING, NodeFacts, compare, fold, per_node
from slurmadm.fleet import collector as F
from slurmadm.fleet.actions import plan_drains
from slurmadm.fleet.ssh import Reply
from slurmadm.slurm.model import NodeInfo

pytestmark = pytest.mark.unit
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "fleet"


def test_nvrm_open_and_proprietary_lines():
    assert F.parse_nvrm((FIX / "nvrm-open-565.txt").read_text()) == "565.57.01"
    assert F.parse_nvrm((FIX / "nvrm-proprietary-580.txt").read_text()) == "580.173.02"
    assert F.parse_nvrm("GCC version: gcc 12\n") is None


def test_nvidia_smi_q_header():
    got = F.parse_smi((FIX / "nvidia-smi-q-450.txt").read_text())
    assert got == {"cuda": "11.0", "smi_driver": "450.66", "vbios": "80.80.31.00.0D"}
    # newer nvidia-smi labels (CUDA UMD / KMD Version) and GPUs with different VBIOS
    got = F.parse_smi("KMD Version : 610.43.03\nCUDA UMD Version : 13.2\n    VBIOS Version : A\n    VBIOS Version : B\n")
    assert got == {"cuda": "13.2", "smi_driver": "610.43.03", "vbios": "mixed:A,B"}


def test_libraries_highest_full_version():
    text = "libnccl.so.2\nlibnccl.so.2.21.5\nlibnccl.so.2.25.1\nlibcudnn.so.9.8.0\nlibcudnn.so.9\n"
    assert F.parse_libs(text) == {"nccl": "2.25.1", "cudnn": "9.8.0"}


@pytest.mark.parametrize("line,want", [
    ("MLNX_OFED_LINUX-24.10-1.1.4.0:", "24.10-1.1.4.0"),
    ("MLNX_OFED_LINUX-5.8-1.0.1.1:", "5.8-1.0.1.1"),
    ("OFED-internal-25.01-0.6.0:", "25.01-0.6.0"),
    ("", None),
])
def test_ofed_info_s(line, want):
    assert F.parse_ofed(line) == want


def test_collector_runs_under_sh_and_parses(tmp_path):
    """The real script under /bin/sh on this machine: it must finish, end with its marker, and
    hash the files it is given."""
    f = tmp_path / "limits.conf"
    f.write_text("* hard memlock unlimited\n")
    out = subprocess.run(["/bin/sh", "-s"], input=F.script([str(tmp_path) + "/*.conf"], ["coreutils"]),
                         capture_output=True, text=True, timeout=60).stdout
    facts = F.parse(out)
    assert facts["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert len(facts[f"file:{f}"]) == 64
    assert "os" in facts and "pkg:coreutils" in facts


def test_incomplete_output_is_an_error():
    with pytest.raises(ValueError):
        F.parse("@@kernel\n6.8.0\n")


def test_script_refuses_odd_input():
    with pytest.raises(UsageError):
        F.script(["/etc/x; rm -rf /"])
    with pytest.raises(UsageError):
        F.script([], ["bad name"])
    with pytest.raises(UsageError):
        F.packages_of({"$(reboot)": "1"})


def test_compare_baseline_then_fleet_majority():
    nodes = {
        "b200-001": {"driver": "570.133.20", "nccl": "2.25.1", "mpi": "4.1.7", "hostname": "b200-001"},
        "b200-017": {"driver": "570.86.10", "nccl": "2.25.1", "mpi": "4.1.7", "hostname": "b200-017"},
        "b200-093": {"driver": "570.86.10", "nccl": "2.25.1", "mpi": "4.1.6", "hostname": "b200-093"},
        "b200-100": {"driver": "570.133.20", "mpi": "4.1.7", "hostname": "b200-100"},
    }
    diffs = compare(nodes, {"driver": "570.133.20", "nccl": "2.25.1"})
    lines = [d.line() for d in diffs]
    assert "b200-[017,093]: driver 570.86.10 (baseline 570.133.20)" in lines
    assert "b200-093: mpi 4.1.6 (fleet's most common 4.1.7)" in lines
    assert f"b200-100: nccl {MISSING} (baseline 2.25.1)" in lines
    assert not any("hostname" in line for line in lines)
    assert sorted(per_node(diffs)) == ["b200-017", "b200-093", "b200-100"]
    assert compare({"a": {"mpi": "1"}, "b": {"mpi": "1"}}, {}) == []


def test_fold_like_clush_b():
    replies = [Reply("b200-001", 0, "6.8.0\n"), Reply("b200-002", 0, "6.8.0\n"), Reply("b200-003", 1, "boom\n"),
               Reply("b200-004", None, "", "127.0.0.1:1: Connection refused", "unreachable")]
    groups = fold(replies)
    assert [(g.hostlist, g.exit) for g in groups] == [("b200-[001-002]", 0), ("b200-003", 1), ("b200-004", None)]
    assert groups[2].error.endswith("Connection refused")


def node(name, *, flags=(), reason=""):
    return NodeInfo(name=name, state="IDLE", flags=frozenset(flags), reason=reason, partitions=("gpu",))


def test_drift_drains_respect_ownership_and_breaker():
    diffs = compare({"b200-001": {"driver": "1"}, "b200-002": {"driver": "1"}, "b200-003": {"driver": "1"},
                     "b200-004": {"driver": "2"}}, {"driver": "2"})
    nodes = [node("b200-001"), node("b200-002", flags=("DRAIN",), reason="disk swap (admin)"), node("b200-003"),
             node("b200-004", flags=("DRAIN",), reason="slurmadm: drift: nccl 1 != 2 [fleet]")]
    acts = {a.node: a for a in plan_drains(per_node(diffs), ["b200-004"], nodes, 0.5)}
    assert acts["b200-001"].action == "drain"
    assert acts["b200-001"].reason == "slurmadm: drift: driver 1 != 2 [fleet]"
    assert acts["b200-002"].action == "none"  # someone else's drain
    # cap floor(0.5*4)=2: b200-004 (ours, still counted until resumed) + b200-001 -> b200-003 is held back
    assert acts["b200-003"].action == "alert" and "breaker" in acts["b200-003"].reason
    assert acts["b200-004"].action == "resume"


def test_node_facts_json_shape():
    assert NodeFacts("n", 1.0, {"a": "b"}).as_dict()["facts"] == {"a": "b"}


def test_local_cheap_facts_from_a_root(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="24.04"\nIMAGE_ID=ubuntu-24.04-dgx\n')
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.8.0-60-generic\n")
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text((FIX / "nvrm-open-565.txt").read_text())
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5").write_text("")
    assert F.local_facts(str(tmp_path)) == {"os_image": "ubuntu-24.04-dgx", "kernel": "6.8.0-60-generic",
                                             "driver": "565.57.01", "nccl": "2.21.5"}


def test_bmc_firmware_facts_drift_only_where_the_bmc_was_read():
    from slurmadm import fleet as fl
    from slurmadm.resources import example_site
    from slurmadm.site import parse_site

    site = parse_site(example_site().read_text())
    base = {k: v for k, v in fl.factsmod.baseline(site.software).items()}
    fw = {f"fw:{k}": v for k, v in site.bmc.firmware.items()}
    got = {
        "b200-001": fl.NodeFacts("b200-001", 1.0, {**base, **fw}),
        "b200-002": fl.NodeFacts("b200-002", 1.0, {**base, **fw, "fw:BIOS": "2.0.0"}),
        "b200-003": fl.NodeFacts("b200-003", 1.0, dict(base), bmc_error="bmc: no answer"),  # BMC not read
    }
    diffs = fl.drift(site, got)
    assert [(d.fact, d.hostlist, d.have, d.want, d.source) for d in diffs] == [
        ("fw:BIOS", "b200-002", "2.0.0", site.bmc.firmware["BIOS"], "baseline")]
    # no node's BMC read: no firmware baseline compared at all
    assert fl.drift(site, {"b200-003": got["b200-003"]}) == []


def test_worker_processes_by_cpus_and_nodes(monkeypatch):
    from slurmadm.fleet import ssh

    monkeypatch.setattr(ssh.os, "sched_getaffinity", lambda pid: {0, 1})
    assert ssh.worker_processes(4, 64) == 1  # a few nodes: threads here
    assert ssh.worker_processes(1024, 512) == 1  # 2 CPUs: one process (measured faster than two)
    monkeypatch.setattr(ssh.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert ssh.worker_processes(128, 128) == 2  # one per 64 nodes at once
    assert ssh.worker_processes(128, 32) == 1  # the fan-out limit, not the node count, decides
    assert ssh.worker_processes(4096, 1024) == 8  # at most half the CPUs


def test_facts_merge_the_bmc_firmware_and_say_which_bmc_did_not_answer(tmp_path, monkeypatch):
    import tomllib

    import tomli_w

    from slurmadm import fleet as fl
    from slurmadm.resources import example_site
    from slurmadm.site import parse_site
    from slurmadm.store import Store

    data = tomllib.loads(example_site().read_text())
    data["store"] = {"path": str(tmp_path / "s.db")}
    data["bmc"]["password_file"] = str(tmp_path / "no-such-bmc.password")
    site = parse_site(tomli_w.dumps(data))

    class Nodes:
        def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
            return [Reply(n, 0, "@@libs\nlibnccl.so.2.25.1\n@@end\n") for n in nodes]

        def close(self):
            pass

    asked = []

    def firmware(site_, nodes):
        asked.append(list(nodes))
        return {"b200-001": {"BIOS": "2.1.0", "BMC": "1.03.10"}, "b200-002": "bmc: b200-002: no answer"}

    monkeypatch.setattr(fl, "bmc_firmware", firmware)
    with Store.for_site(site) as store:
        got = fl.facts(site, ["b200-001", "b200-002"], remote=Nodes(), store=store, bmc=True)
        assert got["b200-001"].facts["fw:BIOS"] == "2.1.0" and got["b200-001"].bmc_error == ""
        assert not any(k.startswith("fw:") for k in got["b200-002"].facts)
        assert got["b200-002"].bmc_error == "bmc: b200-002: no answer"
        assert fl.stored_facts(store, ["b200-001"])["b200-001"].facts["fw:BMC"] == "1.03.10"  # stored too
        # bmc=None: asked only when the site's BMC password file exists (this one does not)
        fl.facts(site, ["b200-001"], remote=Nodes(), store=store)
    assert asked == [["b200-001", "b200-002"]]
