"""Parts inventory (swaps, moves), RMA cases (states, refusals, figures) and the evidence bundle,
on a store filled as health runs, fleet facts and `bmc inventory` fill it."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmadm.errors import UsageError
from slurmadm.repair import bundle, parts, rma
from slurmadm.site.rma import RmaSettings
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "fleet"

GPU = {"board_part": "692-2G525-0200-000", "vbios": "97.00.8A.00.01"}
BUS = ["00000000:18:00.0", "00000000:2a:00.0", "00000000:3a:00.0", "00000000:5d:00.0"]


def gpus(*serials: str) -> str:
    """A `health.gpus` record as repair-core's gpu-count check writes it (keyed by bus id)."""
    return json.dumps([{"index": i, "serial": s, "uuid": f"GPU-{s}", "bus_id": BUS[i], "present": True, **GPU}
                       for i, s in enumerate(serials)])


def slot(i: int) -> str:
    return BUS[i].lower()


def put(store: Store, node: str, key: str, value: str, ts: float) -> None:
    store.db.execute("INSERT INTO node_state (node, key, value, ts) VALUES (?,?,?,?) ON CONFLICT(node, key) "
                     "DO UPDATE SET value=excluded.value, ts=excluded.ts", (node, key, value, ts))


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as s:
        yield s


def test_first_sight_fills_the_inventory_without_swaps(store):
    put(store, "n1", parts.GPU_STATE, gpus("A0", "A1"), 100)
    put(store, "n1", parts.HCA_STATE, json.dumps([{"hca": "mlx5_0", "port": 1, "guid": "a088:c203:0001:0002",
                                                   "firmware": "28.43.1014", "psid": "MT_0000000838"}]), 100)
    assert parts.refresh(store) == []
    inv = parts.inventory(store, "n1")
    assert [(r["kind"], r["slot"], r["part_key"]) for r in inv] == [
        ("gpu", slot(0), "A0"), ("gpu", slot(1), "A1"), ("hca", "mlx5_0", "a088:c203:0001:0002")]
    assert inv[1]["attrs"]["index"] == 1
    assert inv[0]["attrs"]["board_part"] == "692-2G525-0200-000" and inv[2]["attrs"]["psid"] == "MT_0000000838"
    assert parts.refresh(store) == []  # idempotent
    assert store.events(action="repair.part.swapped") == []


def test_a_new_serial_in_a_slot_is_a_swap_audited_once(store):
    put(store, "n1", parts.GPU_STATE, gpus("A0", "A1"), 100)
    parts.refresh(store)
    put(store, "n1", parts.GPU_STATE, gpus("A0", "B1"), 200)
    changes = parts.refresh(store)
    assert [(c.what, c.slot, c.old, c.new) for c in changes] == [("swapped", slot(1), "A1", "B1")]
    assert parts.refresh(store) == []
    ev = store.events(action="repair.part.swapped")
    assert len(ev) == 1 and ev[0].detail["old"] == "A1" and ev[0].detail["new"] == "B1" and ev[0].target == "n1"
    hist = parts.inventory(store, "n1", history=True)
    assert [(r["part_key"], r["removed"]) for r in hist if r["slot"] == slot(1)] == [("A1", 200), ("B1", None)]


def test_a_gpu_moved_to_another_node_keeps_its_stays(store):
    put(store, "n1", parts.GPU_STATE, gpus("A0", "A1"), 100)
    put(store, "n2", parts.GPU_STATE, gpus("C0", "C1"), 100)
    parts.refresh(store)
    # A1 goes into n2's slot 0; n1 has not run health since (its record still shows A1)
    put(store, "n2", parts.GPU_STATE, gpus("A1", "C1"), 300)
    changes = parts.refresh(store)
    assert {(c.what, c.node, c.old, c.new) for c in changes} == {("swapped", "n2", "C0", "A1"),
                                                                 ("moved", "n2", "n1", "n2")}
    assert parts.refresh(store) == []  # n1's older record does not put A1 back there
    assert [(s["node"], s["slot"], s["removed"]) for s in parts.stays(store, "A1")] == [("n1", slot(1), 300),
                                                                                       ("n2", slot(0), None)]
    # n1 then shows its replacement: a swap of a slot already empty of A1, no second move
    put(store, "n1", parts.GPU_STATE, gpus("A0", "D1"), 400)
    changes = parts.refresh(store)
    assert [(c.what, c.new) for c in changes] == [("swapped", "D1")] or changes == []
    assert parts.current(store, "n1", "gpu", slot(1))["part_key"] == "D1"


def test_bmc_inventory_gives_board_psus_and_fans(store):
    inv = {"board_serial": "SIM-BOARD-1", "model": "ipmi_sim B200",
           "psus": [{"name": "PS1", "serial": "PSU-0001", "model": "PWS-3K"}, {"name": "PS2", "serial": "PSU-0002"}],
           "fans": [{"name": "Fan Bay 1", "id": "Bay1", "model": "RKS-440DC"}]}
    put(store, "n1", parts.BMC_STATE, json.dumps(inv), 100)
    parts.refresh(store)
    got = {(r["kind"], r["slot"]): r["part_key"] for r in parts.inventory(store, "n1")}
    assert got == {("board", "board"): "SIM-BOARD-1", ("psu", "PS1"): "PSU-0001", ("psu", "PS2"): "PSU-0002",
                   ("fan", "Bay1"): "n1:Bay1"}


def test_fleet_facts_gpus_count_as_observations(store):
    from slurmadm.fleet.collector import parse_smi_gpus

    text = (FIX / "nvidia-smi-q-450.txt").read_text()
    store.db.execute("INSERT INTO fleet_facts (node, fact, value, ts) VALUES (?,?,?,?)",
                     ("n3", "gpus", json.dumps(parse_smi_gpus(text)), 50))
    parts.refresh(store)
    (row,) = parts.inventory(store, "n3")
    assert row["part_key"] == "GPU-a230e637-c9e1-1b61-3830-a437b874d88d" and row["source"] == "fleet"
    assert row["attrs"]["bus_id"] == "00000000:01:00.0" and row["attrs"]["vbios"] == "80.80.31.00.0D"



FIX = Path(__file__).resolve().parents[2] / "fixtures" / "fleet"


# ------------------------------------------------------------------------------------------ RMA


class FakeSlurm:
    def __init__(self, nodes: dict[str, NodeInfo]):
        self.n = nodes
        self.calls: list[tuple] = []

    def nodes(self, names=None):
        return [self.n[x] for x in (names or self.n) if x in self.n]

    def drain(self, nodes, reason):
        self.calls.append(("drain", tuple(nodes), reason))
        for x in nodes:
            self.n[x] = NodeInfo(x, "IDLE", frozenset({"DRAIN"}), reason, "root")

    def set_reason(self, nodes, reason):
        self.calls.append(("set_reason", tuple(nodes), reason))
        for x in nodes:
            self.n[x] = NodeInfo(x, self.n[x].state, self.n[x].flags, reason, "root")

    def resume(self, nodes):
        self.calls.append(("resume", tuple(nodes)))
        for x in nodes:
            self.n[x] = NodeInfo(x, "IDLE")


class FakeRemote:
    def __init__(self, reply):
        self.reply = reply
        self.commands = []

    def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
        self.commands.append((tuple(nodes), command, timeout))
        return [self.reply(n) for n in nodes]


def make_site(tmp_path):
    secret = tmp_path / "bmc.password"
    secret.write_text("hunter2-bmc-secret\n")
    os.chmod(secret, 0o600)
    dbs = tmp_path / "db.password"
    dbs.write_text("db-secret-4242\n")
    return SimpleNamespace(node_names=["n1", "n2"], bmc=SimpleNamespace(password_file=str(secret)),
                           store=SimpleNamespace(password_file=str(dbs), node_password_file=None),
                           database=SimpleNamespace(password_file=None),
                           repair=SimpleNamespace(rma=RmaSettings(bundle_dir=str(tmp_path / "rma"))))


def test_rma_open_bundle_states_and_figures(store, tmp_path):
    from slurmadm.fleet.ssh import Reply

    site = make_site(tmp_path)
    put(store, "n1", parts.GPU_STATE, gpus("A0", "A1"), 100)
    # a failing check whose detail happens to hold the BMC password must not carry it into the bundle
    store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, value,"
                     " duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (1e12, "r", "n1", "periodic", "xid", "fail", "critical",
                      "GPU1 XID 79 (fallen off the bus) hunter2-bmc-secret", None, 1.0))
    slurm = FakeSlurm({"n1": NodeInfo("n1", "IDLE"), "n2": NodeInfo("n2", "IDLE")})
    remote = FakeRemote(lambda n: Reply(n, 0, "@@slurmadm-bug-report missing\n"))
    with pytest.raises(UsageError, match="not a node"):
        rma.open_rma(site, store, "n9", ticket="T-1", gpu=1, backend=slurm)
    with pytest.raises(UsageError, match="no GPU 7"):
        rma.open_rma(site, store, "n1", ticket="T-1", gpu=7, backend=slurm)
    plan = rma.open_rma(site, store, "n1", ticket="T-1", gpu=1, backend=slurm, dry_run=True)
    assert plan["drain"] == "drain" and slurm.calls == [] and not os.path.exists(tmp_path / "rma")
    out = rma.open_rma(site, store, "n1", ticket="T-1", gpu=1, backend=slurm, remote=remote)
    assert slurm.calls[0][0] == "drain" and slurm.calls[0][2].startswith("slurmadm: repair: rma T-1: gpu 1 A1")
    assert remote.commands and remote.commands[0][2] == 300
    path = out["bundle"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(tmp_path / "rma").st_mode) == 0o700
    man = bundle.read_manifest(path)
    names = {f["name"] for f in man["files"]}
    assert {"part.json", "incidents.json", "xid.txt", "nvml-counters.json", "sel.json", "ib-counters.json",
            "burnin.json"} <= names
    assert {m["name"]: m["why"] for m in man["missing"]}["nvidia-bug-report"] == \
        "nvidia-bug-report.sh is not installed on the node"
    assert man["redacted"] == 2  # xid.txt and health.json
    with tarfile.open(path) as tar:
        blobs = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}
    import hashlib

    for f in man["files"]:
        assert hashlib.sha256(blobs[f["name"]]).hexdigest() == f["sha256"]
    everything = b"".join(blobs.values())
    assert b"hunter2-bmc-secret" not in everything and b"db-secret-4242" not in everything
    assert b"XID 79" in blobs["xid.txt"]
    # a second open of the same part names the open case
    with pytest.raises(UsageError, match="ticket T-1"):
        rma.open_rma(site, store, "n1", ticket="T-2", gpu=1, backend=slurm)
    rma.ship(store, "T-1")
    with pytest.raises(UsageError, match="cannot go to qualifying"):
        rma.qualifying(store, "T-1")
    # the vendor's replacement shows up in the next health run: replaced, by the swap detection
    put(store, "n1", parts.GPU_STATE, gpus("A0", "B1"), 10**10)
    changes = rma.sync(store)
    assert {"ticket": "T-1", "state": "replaced", "new_key": "B1"} in changes
    rma.qualifying(store, "T-1", why="by hand")
    got = rma.close_rma(store, "T-1", why="qualified", backend=slurm)
    assert got["state"] == "closed" and got["resume"] is True and slurm.calls[-1] == ("resume", ("n1",))
    case = rma.get(store, "T-1")
    assert set(case["times"]) == set(rma.STATES)
    figs = rma.figures(store)
    assert figs["cases"] == 1 and figs["per_gpu_model"] == {"692-2G525-0200-000": 1}
    assert figs["vendor_turnaround"]["n"] == 1
    # and a new case for the same part is allowed once the first is closed (B1 is another part)
    rma.open_rma(site, store, "n1", ticket="T-3", gpu=1, backend=slurm, bug_report=False)


def test_rma_open_with_the_node_unreachable_still_writes_the_bundle(store, tmp_path):
    from slurmadm.fleet.ssh import Reply

    site = make_site(tmp_path)
    put(store, "n2", parts.GPU_STATE, gpus("C0"), 100)
    slurm = FakeSlurm({"n2": NodeInfo("n2", "DOWN", frozenset({"NOT_RESPONDING"}))})
    remote = FakeRemote(lambda n: Reply(n, None, "", "connection refused", "unreachable"))
    out = rma.open_rma(site, store, "n2", ticket="T-9", gpu=0, backend=slurm, remote=remote,
                       sel_reader=lambda n: (None, "BMC did not answer: timed out"))
    man = bundle.read_manifest(out["bundle"])
    missing = {m["name"]: m["why"] for m in man["missing"]}
    assert missing["nvidia-bug-report"].startswith("node not reachable over SSH (unreachable: connection refused")
    assert "BMC did not answer" in missing["sel"]
    assert out["drain"] == "leave" and slurm.calls == []  # DOWN+NOT_RESPONDING: someone else's


def test_ticket_and_bug_report_parsing():
    from slurmadm.fleet.ssh import Reply

    with pytest.raises(UsageError):
        rma.check_ticket("a b")
    import base64
    import gzip

    blob = gzip.compress(b"nvidia-bug-report\n")
    out = f"@@slurmadm-bug-report begin\n{base64.b64encode(blob).decode()}\n@@slurmadm-bug-report end\n"
    assert bundle.parse_bug_report(Reply("n", 0, out)) == (blob, "")
    assert bundle.parse_bug_report(Reply("n", 0, "@@slurmadm-bug-report begin\nAAAA"))[1].startswith("output cut")


def test_six_bit_ascii_names_decode_as_the_ipmi_spec_shows():
    """IPMI 2.0 section 43.15's example ("IPMI" = 29h DCh A6h) and sdrcomp's `PS1`; pyghmi 1.6 looped
    for ever on these (slurmadm.bmc.pyghmi_io)."""
    from pyghmi.ipmi import sdr

    from slurmadm.bmc import pyghmi_io

    assert pyghmi_io.six_bit_ascii(bytes([0x29, 0xDC, 0xA6])) == "IPMI"
    pyghmi_io.apply()
    entry = sdr.SDREntry.__new__(sdr.SDREntry)
    assert entry.tlv_decode(0x83, bytes([0xF0, 0x1C, 0x01])) == "PS1"
    assert entry.tlv_decode(0xC3, b"Ps1") == "Ps1"


def test_ipmi_fru_kinds_and_parts():
    from slurmadm.bmc.ipmi import fru_kind, part_of_fru

    assert [fru_kind(n) for n in ("PS1", "PSU2", "Power Supply 1", "FAN1", "Fan Tray 2", "System", "CPU1")] == \
        ["psus", "psus", "psus", "fans", "fans", None, None]
    # pyghmi's decode of tests/fixtures/bmc/ipmi_sim/fru-ps1.hex (product area)
    fru = {"Manufacturer": "SUPERMICRO", "Product name": "PWS-3K04G-2R", "Model": "PWS-3K04G-2R",
           "Hardware Version": "1.1", "Serial Number": "P3K04GA10001"}
    assert part_of_fru("PS1", fru) == {"name": "PS1", "serial": "P3K04GA10001", "model": "PWS-3K04G-2R",
                                       "part": "PWS-3K04G-2R", "manufacturer": "SUPERMICRO"}


def test_rma_figures_reach_the_head_exporter(store, tmp_path):
    from slurmadm.exporter.head import rma_metrics
    from slurmadm.exporter.storefacts import LocalStoreFacts

    site = make_site(tmp_path)
    put(store, "n1", parts.GPU_STATE, gpus("A0"), 100)
    rma.open_rma(site, store, "n1", ticket="T-5", gpu=0, bug_report=False)
    facts = LocalStoreFacts(str(store.path)).read()
    assert facts["rma"]["by_state"]["open"] == 1
    series = {m.name: [(s.labels, s.value) for s in m.samples] for m in rma_metrics(facts["rma"])}
    assert ({"state": "open"}, 1) in series["slurmadm_rma_cases"]
    assert series["slurmadm_rma_cases_per_class"] == [({"class": "unknown"}, 1)]


def test_the_case_moves_the_ladder_and_closes_on_a_passed_qualification(store, tmp_path):
    from slurmadm.repair import incidents

    site = make_site(tmp_path)
    put(store, "n1", parts.GPU_STATE, gpus("A0", "A1"), 100)
    store.db.execute("INSERT INTO incidents (id, node, part_kind, part_key, slot, class, state, opened_ts, updated_ts)"
                     " VALUES ('r1','n1','gpu','A1','1','GPU_LOST','open',50,50)")
    slurm = FakeSlurm({"n1": NodeInfo("n1", "IDLE")})
    rma.open_rma(site, store, "n1", ticket="T-7", gpu=1, backend=slurm, bug_report=False)
    (inc,) = incidents.list_incidents(store, part_key="A1")
    assert inc.state == "rma"  # held: repair run takes no ladder step on it
    case = rma.get(store, "T-7")
    assert (case["fault_ts"], case["class"]) == (50, "GPU_LOST")
    put(store, "n1", parts.GPU_STATE, gpus("A0", "B1"), 10**10)
    rma.sync(store)
    (inc,) = incidents.list_incidents(store, part_key="A1")
    assert (inc.state, inc.step) == ("qualifying", "qualify") and rma.get(store, "T-7")["state"] == "replaced"
    # repair run's qualification passes: the case is closed by the next sync
    store.db.execute("INSERT INTO qualifications (id, incident_id, node, started, status) "
                     "VALUES ('r1-q1','r1','n1',?, 'passed')", (10**10 + 5,))
    changes = rma.sync(store)
    assert {"ticket": "T-7", "state": "closed", "resume": True} in changes
    assert rma.get(store, "T-7")["state"] == "closed"
