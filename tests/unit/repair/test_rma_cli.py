"""`repair parts` and `repair rma` through click (the example site, a store in tmp, a fake Slurm):
JSON shapes, one-line errors with exit 2 for an unknown node, GPU or ticket, a second open refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.cli.common import Group
from slurmadm.cli.repair_rma import parts, rma
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


@pytest.fixture
def site(tmp_path, monkeypatch):
    text = EXAMPLE.read_text().replace('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{tmp_path}/s.db"')
    text = text.replace('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{tmp_path}/audit.jsonl"')
    p = tmp_path / "site.toml"
    p.write_text(text)
    monkeypatch.setenv("SLURMADM_SITE", str(p))

    class Slurm:
        def __init__(self):
            self.calls = []

        def nodes(self, names=None):
            return [NodeInfo(n, "IDLE") for n in names or []]

        def drain(self, nodes, reason):
            self.calls.append(("drain", nodes, reason))

        def set_reason(self, nodes, reason):
            self.calls.append(("set_reason", nodes, reason))

        def resume(self, nodes):
            self.calls.append(("resume", nodes))

    slurm = Slurm()
    monkeypatch.setattr("slurmadm.cli.repair_rma._backend", lambda: slurm)
    from slurmadm.repair import rma as rmamod
    from slurmadm.site.rma import RmaSettings

    monkeypatch.setattr(rmamod, "settings", lambda s: RmaSettings(bundle_dir=str(tmp_path / "rma")))
    with Store(tmp_path / "s.db") as st:
        st.set_node_state("b200-001", "health.gpus", json.dumps(
            [{"index": 0, "serial": "1655000000001", "uuid": "GPU-1", "bus_id": "00000000:18:00.0"}]))
    return slurm


@pytest.fixture
def cli():
    @__import__("click").group(cls=Group)
    def repair():
        pass
    repair.add_command(parts)
    repair.add_command(rma)
    return repair


def run(cli, *args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_parts_and_rma_round_trip(site, cli):
    r = run(cli, "parts", "b200-001", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["parts"][0]["part_key"] == "1655000000001"
    r = run(cli, "parts", "nope-1")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "not a node" in r.output
    r = run(cli, "rma", "open", "b200-001", "--gpu", "5", "--ticket", "NV-1")
    assert r.exit_code == 2 and "no GPU 5" in r.output and r.output.count("\n") == 1
    r = run(cli, "rma", "open", "b200-001", "--gpu", "0", "--ticket", "NV-1", "--no-bug-report", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["manifest"]["missing"] and site.calls[0][0] == "drain"
    r = run(cli, "rma", "open", "b200-001", "--part", "1655000000001", "--ticket", "NV-2", "--no-bug-report")
    assert r.exit_code == 2 and "ticket NV-1" in r.output
    r = run(cli, "rma", "show", "NV-404")
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert run(cli, "rma", "ship", "NV-1").exit_code == 0
    r = run(cli, "rma", "list", "--json")
    got = json.loads(r.output)
    assert got["cases"][0]["state"] == "shipped" and got["figures"]["cases"] == 1
    r = run(cli, "rma", "close", "NV-1", "--reason", "vendor refused", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["state"] == "closed"


def test_ship_replaced_and_qualify_show_their_move_with_dry_run_and_change_nothing(site, cli, tmp_path):
    r = run(cli, "rma", "open", "b200-001", "--gpu", "0", "--ticket", "NV-7", "--no-bug-report", "--json")
    assert r.exit_code == 0, r.output

    def state_and_audit():
        with Store(tmp_path / "s.db") as st:
            case = st.query("SELECT state, updated FROM rma_cases WHERE ticket='NV-7'")[0]
            return (case["state"], case["updated"], len(st.events(action="repair.rma.*")))

    before = state_and_audit()
    r = run(cli, "rma", "ship", "NV-7", "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["dry_run"] and (plan["from"], plan["to"], plan["changes"]) == ("open", "shipped", True)
    assert state_and_audit() == before
    r = run(cli, "rma", "ship", "NV-7", "--dry-run")
    assert "would move RMA NV-7" in r.output and "from open to shipped" in r.output
    # refused as the real move would be, still nothing changed
    r = run(cli, "rma", "qualify", "NV-7", "--dry-run")
    assert r.exit_code == 2 and "cannot go to qualifying" in r.output and r.output.count("\n") == 1
    assert state_and_audit() == before

    assert run(cli, "rma", "ship", "NV-7").exit_code == 0
    shipped = state_and_audit()
    assert shipped[0] == "shipped" and shipped[2] == before[2] + 1
    r = run(cli, "rma", "replaced", "NV-7", "--new", "1655000000099", "--dry-run", "--json")
    plan = json.loads(r.output)
    assert (plan["to"], plan["new_key"]) == ("replaced", "1655000000099") and state_and_audit() == shipped
    assert run(cli, "rma", "ship", "NV-7", "--dry-run", "--json").exit_code == 0  # already there
    r = run(cli, "rma", "ship", "NV-7", "--dry-run")
    assert "already shipped; nothing to do" in r.output
