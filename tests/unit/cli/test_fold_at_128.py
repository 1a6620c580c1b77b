"""What people see at the reference size (issue 27): `health status`, `bmc power status` and
`fleet drift` of the example site's 128 nodes fold the nodes that agree into one row with a
clush-style hostlist (slurmadm.hostlist.fold), while --json stays one row per node."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.cli import health as health_cli
from slurmadm.errors import UnreachableError
from slurmadm.hostlist import expand, fold, neutral
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store
from tests.unit.siteedit import site_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODES = expand("b200-[001-128]")
CHECKS = ("ecc-uncorrected", "gpu-count", "row-remap")


def test_fold_groups_by_key_and_reads_a_nodes_own_name_as_node():
    errs = [(n, neutral(f"{n}-bmc: connection refused", n)) for n in ("b200-002", "b200-001", "b200-010")]
    errs.append(("b200-003", neutral("b200-003-bmc: timed out", "b200-003")))
    groups = fold(errs)
    assert [(g.hostlist, g.count, g.key) for g in groups] == [
        ("b200-[001-002,010]", 3, "<node>-bmc: connection refused"), ("b200-003", 1, "<node>-bmc: timed out")]
    assert groups[0].named(groups[0].key) == "<node>-bmc: connection refused"  # many: the placeholder stays
    assert groups[1].named(groups[1].key) == "b200-003-bmc: timed out"  # one: its own name back
    # only the whole name: b200-001 inside b200-0010 is another node's name
    assert neutral("b200-0010 and b200-001", "b200-001") == "b200-0010 and <node>"


@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    path = site_file(tmp_path, monkeypatch)
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    return path


def _results(path: str, bad: dict[str, tuple[str, str, str]]) -> None:
    """Every check passing on every node, but `bad`: node -> (check, status, detail)."""
    now = time.time()
    with Store(path) as store, store.transaction() as db:
        for i, node in enumerate(NODES):
            for check in CHECKS:
                status, detail = "pass", f"measured {i}"  # pass details differ from node to node
                if node in bad and bad[node][0] == check:
                    status, detail = bad[node][1], bad[node][2]
                db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, "
                           "detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                           (now - i, f"r{i}", node, "periodic" if i % 2 else "prolog", check, status, "critical",
                            detail, None, 1.0))


def test_health_status_of_128_nodes_is_one_row_per_problem_and_one_for_the_rest(site, monkeypatch):
    bad = {"b200-005": ("ecc-uncorrected", "fail", "GPU5 volatile uncorrected ECC=2"),
           "b200-017": ("gpu-count", "fail", "7 of 8 GPUs on b200-017"),
           "b200-018": ("gpu-count", "fail", "7 of 8 GPUs on b200-018"),  # the same but for its name
           "b200-090": ("row-remap", "warn", "GPU0 2 pending row remaps")}
    _results(tomllib.loads(site.read_text())["store"]["path"], bad)
    drained = [NodeInfo(n, "IDLE", frozenset({"DRAIN"}), reason=f"slurmadm: gpu-count: 7 of 8 GPUs on {n} [prolog]",
                        reason_user="slurm") for n in ("b200-017", "b200-018")]
    drained.append(NodeInfo("b200-005", "IDLE", frozenset({"DRAIN"}), reason="cable check", reason_user="alice"))
    monkeypatch.setattr(health_cli, "slurm_nodes", lambda: [*drained, NodeInfo("b200-001", "IDLE")])

    r = CliRunner().invoke(cli, ["health", "status"])
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["nodes", "n", "check", "status", "context", "when", "detail"]
    end = lines.index("drained nodes (whole reason)")
    rows = [ln for ln in lines[1:end] if ln.strip()]
    assert len(rows) == 4, "\n".join(rows)  # 3 distinct problems + the 124 quiet nodes, not 384 rows
    assert rows[0].split()[:4] == ["b200-005", "1", "ecc-uncorrected", "fail"]
    assert rows[0].endswith("GPU5 volatile uncorrected ECC=2")
    assert rows[1].split()[:4] == ["b200-[017-018]", "2", "gpu-count", "fail"]
    assert rows[1].endswith("7 of 8 GPUs on <node>")
    assert rows[2].split()[:4] == ["b200-090", "1", "row-remap", "warn"]
    quiet = rows[3].split()
    assert quiet[:4] == ["b200-[001-004,006-016,019-089,091-128]", "124", "(all)", "pass"]
    assert quiet[4] == "periodic,prolog" and rows[3].endswith("all 3 check(s) pass")
    assert ".." in rows[3]  # the quiet nodes' results span 127 s: the oldest, then `..`
    drains = [ln for ln in lines[end + 2:] if ln.strip()]
    assert len(drains) == 2
    assert drains[0].split()[:3] == ["b200-[017-018]", "IDLE+DRAIN", "slurm"]
    assert drains[0].endswith("slurmadm: gpu-count: 7 of 8 GPUs on <node> [prolog]")
    assert drains[1].split()[:3] == ["b200-005", "IDLE+DRAIN", "alice"] and drains[1].endswith("cable check")

    js = json.loads(CliRunner().invoke(cli, ["health", "status", "--json"]).stdout)
    assert len(js) == 128 * len(CHECKS)  # --json stays per node and check
    assert {x["node"] for x in js if x["status"] != "pass"} == set(bad)


def test_health_status_of_one_failing_node_names_it_whole(site, monkeypatch):
    _results(tomllib.loads(site.read_text())["store"]["path"],
             {"b200-017": ("gpu-count", "fail", "7 of 8 GPUs on b200-017")})
    monkeypatch.setattr(health_cli, "slurm_nodes", lambda: [])
    r = CliRunner().invoke(cli, ["health", "status", "--nodes", "b200-[016-017]"])
    rows = [ln for ln in r.output.splitlines()[1:] if ln.strip()]
    assert rows[0].split()[:4] == ["b200-017", "1", "gpu-count", "fail"] and rows[0].endswith("on b200-017")
    assert rows[1].split()[:4] == ["b200-016", "1", "(all)", "pass"]
    assert len(rows) == 2


def test_bmc_power_status_of_128_nodes_folds_answers_and_errors(tmp_path, monkeypatch):
    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.fanout import Conn, Fleet

    class Bmc:
        def __init__(self, node):
            self.node = node

        def power_state(self) -> str:
            if self.node in ("b200-040", "b200-041", "b200-120"):
                raise UnreachableError(f"{self.node}-bmc:623: no answer within 2 s")
            return "off" if self.node == "b200-077" else "on"

    monkeypatch.setattr("slurmadm.cli.bmc._fleet", lambda site: Fleet(site, Credentials("admin", Secret("pw-123456"))))
    monkeypatch.setattr(Conn, "bmc", property(lambda self: Bmc(self.node)))
    text = (REPO / "site.example.toml").read_text()
    text = text.replace('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{tmp_path}/s.db"')
    text = text.replace('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{tmp_path}/audit.jsonl"')
    (tmp_path / "bmc-site.toml").write_text(text)
    site = str(tmp_path / "bmc-site.toml")
    r = CliRunner().invoke(cli, ["bmc", "power", "status", "b200-[001-128]", "--site", site])
    assert r.exit_code == 3, r.output  # a BMC did not answer
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[0].split() == ["nodes", "n", "power"]
    assert [ln.split(None, 2) for ln in lines[1:]] == [
        ["b200-[001-039,042-076,078-119,121-128]", "124", "on"], ["b200-077", "1", "off"],
        ["b200-[040-041,120]", "3", "unreachable: <node>-bmc:623: no answer within 2 s"]]
    js = json.loads(CliRunner().invoke(cli, ["bmc", "power", "status", "b200-[001-128]", "--json",
                                             "--site", site]).stdout)
    assert len(js) == 128 and js[39] == {"node": "b200-040", "power": None, "seconds": js[39]["seconds"],
                                         "error": "b200-040-bmc:623: no answer within 2 s"}


def test_fleet_drift_of_128_nodes_is_one_row_per_drift_and_one_line_per_shared_error(site, monkeypatch):
    from slurmadm import fleet as fleetmod
    from slurmadm.fleet import NodeFacts

    from slurmadm.fleet import collector as factsmod
    from slurmadm.site import load_site

    base = dict(factsmod.baseline(load_site(str(site)).software), mpi="4.1.7")  # every node as the baseline
    down = {"b200-030", "b200-031", "b200-099"}

    def facts(site, names, refresh=True):
        out = {}
        for n in names:
            if n in down:
                out[n] = NodeFacts(n, None, error=f"ssh {n}:22: connection refused", kind="unreachable")
            else:
                have = dict(base, hostname=n)
                if n in ("b200-002", "b200-003", "b200-050"):
                    have["nccl"] = "2.21.5"
                out[n] = NodeFacts(n, 1.0, have)
        return out

    monkeypatch.setattr(fleetmod, "facts", facts)
    r = CliRunner().invoke(cli, ["fleet", "drift"])
    assert r.exit_code == 3, r.output  # unreachable wins over drift
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines[0].split() == ["nodes", "fact", "has", "wanted", "from"]
    assert lines[1].split()[:3] == ["b200-[002-003,050]", "nccl", "2.21.5"]
    assert lines[2:] == ["b200-[030-031,099]: ssh <node>:22: connection refused"]  # 3 nodes, one line
    js = json.loads(CliRunner().invoke(cli, ["fleet", "drift", "--json"]).stdout)
    assert sorted(x["node"] for x in js["unreachable"]) == sorted(down)  # per node
