"""`slurmadm top` at the reference size (issue 27): the example site's 128 nodes in an 80x24
terminal and in a 200x60 one, rendered as rich's Live draws the alternate screen (rich.screen.Screen:
exactly the terminal's lines, the rest cut off). Every node must be on the first screen with its
state and GPU utilisation readable without colour (a letter and a digit), each grid row labelled
by the hostlist it covers."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from rich.screen import Screen

from slurmadm.exporter.head import Job, Snapshot
from slurmadm.hostlist import expand
from slurmadm.site import parse_site
from slurmadm.slurm.model import NodeInfo
from slurmadm.top import STATE_CHAR, Frame, build_frame, compact_rows, util_char

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
NAMES = expand("b200-[001-128]")
XID = "slurmadm: xid: GPU2 XID 79 [prolog]"


def fleet() -> tuple[list[NodeInfo], dict[str, float], dict[str, str]]:
    """128 nodes: two drained for the same XID, one down, one mixed, a third idle, the rest
    allocated at varied utilisation (idle ones unknown to Prometheus). Also each node's
    expected two characters."""
    nodes, util, want = [], {}, {}
    for i, n in enumerate(NAMES, 1):
        kw = {"partitions": ("gpu",), "gres": "gpu:b200:8"}
        if i in (5, 6):
            nodes.append(NodeInfo(n, "IDLE", frozenset({"DRAIN"}), XID, **kw))
            want[n] = "D-"
        elif i == 77:
            nodes.append(NodeInfo(n, "DOWN", frozenset(), "Not responding", **kw))
            want[n] = "X-"
        elif i == 100:
            nodes.append(NodeInfo(n, "MIXED", **kw))
            util[n] = 100.0
            want[n] = "m9"
        elif i % 3 == 0:
            nodes.append(NodeInfo(n, "IDLE", **kw))
            want[n] = ".-"
        else:
            nodes.append(NodeInfo(n, "ALLOCATED", **kw))
            util[n] = float((i * 7) % 100)
            want[n] = "A" + str(int(util[n] // 10))
    return nodes, util, want


def screen(width: int, height: int) -> list[str]:
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    nodes, util, _ = fleet()
    console = Console(width=width, height=height, record=True, color_system=None)
    console.print(Screen(build_frame(site, Frame(Snapshot(nodes, [], {}), util, "", 0), width=width)))
    lines = console.export_text().split("\n")
    assert len(lines) <= height + 1  # the screen is the terminal's lines, no more
    return lines[:height]


def grid_rows(lines: list[str]) -> list[tuple[str, list[str]]]:
    """The grid panel's rows (between its ╭ and ╰ lines): (label, cells)."""
    top = next(i for i, ln in enumerate(lines) if ln.startswith("╭") and "nodes: state" in ln)
    end = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
    rows = []
    for ln in lines[top + 1:end]:
        label, *cells = ln.strip("│ ").split()
        rows.append((label, cells))
    return rows


@pytest.mark.parametrize(("width", "height", "per_row"), [(80, 24, 16), (200, 60, 32)])
def test_128_nodes_fit_the_first_screen_with_state_and_utilisation(width, height, per_row):
    lines = screen(width, height)
    assert max(len(ln) for ln in lines) <= width
    rows = grid_rows(lines)
    assert len(rows) == 128 // per_row
    _, _, want = fleet()
    seen = []
    for label, cells in rows:
        names = expand(label)  # each row says which nodes it holds, as a hostlist
        assert len(names) == len(cells) == per_row, (label, cells)
        assert cells == [want[n] for n in names], label  # state letter + GPU % in tens, per node
        seen += names
    assert seen == NAMES  # every node once, in order
    legend = " ".join(lines).replace("  ", " ")
    assert "D drained" in legend and "X down" in legend and "GPU % in tens" in legend
    # the two drains for the same XID are one row with their hostlist, still on the first screen
    drains = [ln for ln in lines if XID in ln]
    assert len(drains) == 1 and "b200-[005-006]" in drains[0], "\n".join(lines)


def test_the_large_terminal_shows_the_whole_frame_and_the_drains_folded():
    lines = screen(200, 60)
    text = "\n".join(lines)
    for title in ("drains", "queue", "projects near quota"):  # side by side, all on screen
        assert title in text
    assert sum(XID in ln for ln in lines) == 1 and "b200-[005-006]" in text
    assert lines[-1].strip() == ""  # room to spare below


def test_a_few_nodes_keep_a_named_cell_each():
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    nodes = [NodeInfo(f"b200-00{i}", "ALLOCATED", partitions=("gpu",), gres="gpu:b200:8") for i in range(1, 5)]
    console = Console(width=80, height=24, record=True, color_system=None)
    console.print(build_frame(site, Frame(Snapshot(nodes, [], {}), {"b200-002": 42.0}, "", 0), width=80))
    text = console.export_text()
    assert "b200-002   42%" in text and "b200-004" in text and "GPU % in tens" not in text


def test_compact_rows_and_the_utilisation_digit():
    assert [util_char(u) for u in (None, 0, 9.9, 10, 55, 99.9, 100, 250, -3)] == \
        ["-", "0", "0", "1", "5", "9", "9", "9", "0"]
    label_w, rows = compact_rows(NAMES, 80)
    assert [label for label, _ in rows][:2] == ["b200-[001-016]", "b200-[017-032]"] and label_w == 14
    # an odd set of names: labels are still their hostlists, none wider than the column
    odd = ["login1", *NAMES[:40:3], "gpu-a", "gpu-b"]
    label_w, rows = compact_rows(odd, 80)
    assert sum(len(r) for _, r in rows) == len(odd) and all(label_w + 1 + 3 * len(r) <= 76 for _, r in rows)
    assert set(STATE_CHAR.values()) & {"-", *"0123456789"} == set()  # a letter never reads as a digit


REPAIR = "slurmadm: repair: reset: GPU3 XID 79 (reset-class)"


def busy_fleet(site) -> tuple[list[NodeInfo], list[Job], dict[str, float]]:
    """fleet() with a node in repair, a queue (running and four pending reasons) and every
    project with a quota at it."""
    nodes, util, _ = fleet()
    nodes[9] = NodeInfo(NAMES[9], "IDLE", frozenset({"DRAIN"}), REPAIR, partitions=("gpu",), gres="gpu:b200:8")
    util.pop(NAMES[9], None)  # drained: Prometheus has nothing for it
    jobs = [Job(str(i), "PENDING", reason, "bob", "ml-llm", "gpu", True, 8, "", "x")
            for i, reason in enumerate(["QOSGrpGRES", "Priority", "Resources", "Dependency"])]
    jobs += [Job(f"9{i}", "RUNNING", "None", "bob", p.name, "gpu", True, p.gpu_quota, "b200-002", "t")
             for i, p in enumerate(site.projects) if p.gpu_quota]
    return nodes, jobs, util


@pytest.mark.parametrize(("width", "height"), [(80, 24), (100, 30), (200, 60)])
def test_the_whole_frame_fits_the_terminal_with_queue_projects_and_repair(width, height):
    """Issue 34: in 80x24 at 128 nodes the queue and project sections used to fall off the
    bottom. Every line of the frame fits the terminal, the grid, the drains, the queue and the
    projects are all on it, cut rows are counted, and a node in repair has its own letter."""
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    nodes, jobs, util = busy_fleet(site)
    console = Console(width=width, height=height, record=True, color_system=None)
    console.print(build_frame(site, Frame(Snapshot(nodes, jobs, {}), util, "", 0), width=width, height=height))
    lines = console.export_text().rstrip("\n").split("\n")
    assert len(lines) <= height, "\n".join(lines)
    assert max(len(ln) for ln in lines) <= width
    text = "\n".join(lines)
    rows = grid_rows(lines)
    assert sum(len(cells) for _, cells in rows) == 128
    assert rows[0][1][9] == "F-" and "F in repair" in " ".join(lines).replace("  ", " ")
    assert "in repair 1" in lines[1]  # the summary counts it apart
    assert any(REPAIR[:30] in ln and "in repair" in ln for ln in lines)  # its drain row says so
    if width < 150:  # stacked: each section's title heads its first column
        for title in ("drains", "queue", "projects near quota"):
            assert any(ln.startswith(title) for ln in lines), title
    for title in ("drains", "queue", "projects near quota"):
        assert any(ln.lstrip().startswith(title) or f" {title} " in ln for ln in lines), (title, text)
    assert "running" in text and any(p.name in text for p in site.projects if p.gpu_quota)  # a row of each
    if height == 24:
        assert "more" in text  # the rest is counted, not dropped silently


def test_empty_sections_are_one_line_each():
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    nodes = [NodeInfo(n, "IDLE", partitions=("gpu",), gres="gpu:b200:8") for n in NAMES]
    console = Console(width=80, height=24, record=True, color_system=None)
    console.print(build_frame(site, Frame(Snapshot(nodes, [], {}), {}, "", 0), width=80, height=24))
    lines = console.export_text().rstrip("\n").split("\n")
    assert lines[-3:] == ["drains: none", "queue: none", "projects near quota: none"]


def test_in_repair_is_told_by_the_reasons_check_id():
    from slurmadm.top import in_repair

    assert in_repair(REPAIR) and in_repair("slurmadm: repair: lemon: 3 incidents in 28 days")
    assert in_repair("slurmadm: repair: rma T-123: GPU3 serial 1650924060123")
    assert not in_repair("slurmadm: xid: GPU2 XID 79 [prolog]") and not in_repair("repair: cable [alice]")


def test_nodes_with_an_open_incident_are_marked_in_repair(tmp_path):
    """Issue 44: `top` marks a node with a hardware incident not closed, whoever drained it (here
    health, for the XID; another still running its job), read from the store each frame."""
    from slurmadm.repair import incidents
    from slurmadm.top import incident_nodes
    from tests.unit.repair.helpers import health_drain, inventory, xid_line
    from tests.unit.siteedit import edited, put

    site = parse_site(edited(put("store.path", str(tmp_path / "s.db"))), source="site.toml")
    from slurmadm.store import Store

    with Store(site.store.path) as store:
        inventory(store, "b200-005", [f"s{i}" for i in range(8)])
        health_drain(store, "b200-005", [("xid", xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"))],
                     ts=1_800_000_000, run_id="a")
        incidents.ingest(store, now=1_800_000_001)
    assert incident_nodes(site) == {"b200-005"}
    nodes, util, _ = fleet()
    frame = Frame(Snapshot(nodes, [], {}), util, "", 0, frozenset({"b200-005", "b200-007"}))
    console = Console(width=80, height=24, record=True, color_system=None)
    console.print(build_frame(site, frame, width=80, height=24))
    text = console.export_text()
    summary = next(ln for ln in text.split("\n") if ln.startswith("allocated"))
    assert "in repair 2" in summary and "drained 1" in summary, text
    assert "b200-007  in repair" in text and "incident open: slurmadm repair status" in text
    plain = Console(width=80, height=24, record=True, color_system=None)
    plain.print(build_frame(site, Frame(Snapshot(nodes, [], {}), util, "", 0), width=80, height=24))
    summary = next(ln for ln in plain.export_text().split("\n") if ln.startswith("allocated"))
    assert "in repair" not in summary and "drained 2" in summary  # without incidents: health's drains
    broken = parse_site(edited(put("store.path", "/nonexistent/dir/s.db")), source="site.toml")
    assert incident_nodes(broken) == frozenset()  # no store: Slurm's view alone
