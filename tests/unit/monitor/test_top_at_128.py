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

from slurmadm.exporter.head import Snapshot
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
