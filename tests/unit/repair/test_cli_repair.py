"""`slurmadm repair ladder|status|history|lemons|clear|install-timer`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain, inventory, xid_line
from tests.unit.siteedit import DELETE, edited, put

pytestmark = pytest.mark.unit

RESET = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")


@pytest.fixture
def site(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(edited(put("store.path", str(tmp_path / "store.db")), put("store.audit_log", DELETE)))
    return f


def run(*args):
    return CliRunner().invoke(cli, ["repair", *map(str, args)])


def nodes(site):
    from slurmadm.site import load

    return load.load_site(str(site)).node_names


def test_ladder(site):
    res = run("ladder", "--site", site, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["lemon"]["incidents"] == 3 and "THERMAL" in out["auto_resume"]
    assert run("ladder", "--site", site).exit_code == 0


def test_status_folds_nodes_and_history_by_node_and_serial(site, tmp_path):
    names = nodes(site)[:4]
    with Store(tmp_path / "store.db") as store:
        for k, n in enumerate(names):
            inventory(store, n, [f"{n}-s{i}" for i in range(8)])
            health_drain(store, n, [("xid", RESET)], ts=1_800_000_000 + k, run_id=f"r{k}")
    res = run("status", "--site", site)
    assert res.exit_code == 0, res.output
    rows = [x for x in res.output.splitlines() if "RESET_GPU" in x]
    assert len(rows) == 1 and "4 parts" in rows[0], res.output  # four nodes, one row
    js = json.loads(run("status", "--site", site, "--json").output)
    assert len(js) == 4 and {r["next"] for r in js} == {"reset"}
    hist = json.loads(run("history", names[0], "--site", site, "--json").output)
    assert [h["part_key"] for h in hist] == [f"{names[0]}-s2"]
    by_serial = run("history", "--gpu", f"{names[1]}-s2", "--site", site)
    assert by_serial.exit_code == 0 and names[1] in by_serial.output


def test_unknown_node_or_serial_is_one_line_exit_2(site):
    for args in (("history", "no-such-node"), ("history", "--gpu", "0000"), ("clear", "no-such-node", "--reason", "x")):
        res = run(*args, "--site", site)
        assert res.exit_code == 2, res.output
        assert len(res.output.strip().splitlines()) == 1, res.output
    assert run("history", "--site", site).exit_code == 2


def test_clear(site, tmp_path):
    node = nodes(site)[0]
    with Store(tmp_path / "store.db") as store:
        health_drain(store, node, [("xid", RESET)], ts=1_800_000_000, run_id="r")
    dry = run("clear", node, "--reason", "replaced the riser", "--dry-run", "--site", site)
    assert dry.exit_code == 0 and "would clear" in dry.output
    res = json.loads(run("clear", node, "--reason", "replaced the riser", "--site", site, "--json").output)
    assert len(res["cleared"]) == 1
    assert "no incidents open" in run("status", "--site", site).output
    assert json.loads(run("lemons", "--site", site, "--json").output) == []


def test_install_timer_dry_run(site, tmp_path):
    res = run("install-timer", "--site", site, "--dry-run", "--dest", tmp_path / "units")
    assert res.exit_code == 0, res.output
    assert "repair run --site" in res.output and "OnUnitActiveSec=5min" in res.output
    cron = run("install-timer", "--site", site, "--cron", "--dest", tmp_path / "cron", "--interval", "10m")
    assert cron.exit_code == 0 and (tmp_path / "cron" / "slurmadm-repair").read_text().count("*/10 * * * *") == 1


def test_clear_with_resume_brings_back_only_slurmadms_drain(site, tmp_path, monkeypatch):
    """Issue 44: a lemon is never resumed automatically; `repair clear --resume` brings it back
    (after its --dry-run shows it), audited. Someone else's drain stays; without --resume the
    drain stays and the output says how to qualify it."""
    from slurmadm.slurm.model import NodeInfo

    lemon, theirs = nodes(site)[:2]

    class Slurm:
        def __init__(self):
            self.by = {lemon: NodeInfo(lemon, "IDLE", flags=frozenset({"DRAIN"}), reason_user="root",
                                       reason="slurmadm: repair: lemon: RESET_GPU GPU2: 3 incidents [repair]"),
                       theirs: NodeInfo(theirs, "IDLE", flags=frozenset({"DRAIN"}), reason="riser swap",
                                        reason_user="alice")}
            self.resumed = []

        def nodes(self, names=None):
            return [self.by[n] for n in names]

        def resume(self, names):
            self.resumed += names

    slurm = Slurm()
    monkeypatch.setattr("slurmadm.cli.repair._backend", lambda: slurm)
    with Store(tmp_path / "store.db") as store:
        health_drain(store, lemon, [("xid", RESET)], ts=1_800_000_000, run_id="r")
    dry = json.loads(run("clear", lemon, "--reason", "GPU2 swapped", "--resume", "--dry-run", "--json",
                         "--site", site).output)
    assert dry["resume"].startswith("would resume") and slurm.resumed == []
    res = json.loads(run("clear", lemon, "--reason", "GPU2 swapped", "--resume", "--json", "--site", site).output)
    assert len(res["cleared"]) == 1 and res["resume"].startswith("resumed") and slurm.resumed == [lemon]
    with Store(tmp_path / "store.db") as store:
        assert [e.reason for e in store.events(action="repair.clear.resume")] == ["GPU2 swapped"]
    other = run("clear", theirs, "--reason", "checked", "--resume", "--site", site)
    assert other.exit_code == 0 and "left to them" in other.output and slurm.resumed == [lemon]
    with Store(tmp_path / "store.db") as store:
        health_drain(store, lemon, [("xid", RESET)], ts=1_800_000_100, run_id="r2")
    kept = run("clear", lemon, "--reason", "reseated", "--site", site)
    assert "repair qualify" in kept.output and slurm.resumed == [lemon]
