"""`slurmadm top`: a live terminal view for the head node.

One frame = one Slurm read (the head exporter's SlurmHead: node listing, squeue, sshare) plus,
when Prometheus answers, each node's mean GPU utilisation. `build_frame` is pure (a Snapshot and
the utilisation in, a rich renderable out), so the layout is tested without a terminal; the CLI
drives it with rich's Live on the alternate screen (no flicker) and quits on `q`.

The node grid: a named cell per node (name in its state's colour, GPU %) while the nodes fit in
NAMED_ROWS rows; past that (the reference site's 128 nodes in 80x24 or 200x60) two characters a
node, a state letter and the GPU % in tens, rows of up to COMPACT_MAX nodes labelled by the
hostlist they cover, so the whole fleet stays on the first screen. Drains that agree (state,
owner, reason) are one row with their hostlist.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Group as RGroup
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..exporter.head import Aggregate, Snapshot, aggregate
from ..hostlist import compress, fold, neutral

STATE_STYLE = {"idle": "green", "mixed": "cyan", "allocated": "blue", "completing": "blue", "draining": "yellow",
               "drained": "yellow", "down": "bold red", "reserved": "magenta"}


@dataclass
class Frame:
    snap: Snapshot
    util: dict[str, float]  # node -> mean GPU utilisation %, when Prometheus answered
    error: str = ""
    at: float = 0.0


# Utilisation is coloured only where jobs hold the node: an idle or drained node at 0 % is as it
# should be, not an alarm.
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
LEGEND = ("node name: state colour (idle green, mixed cyan, allocated blue, draining/drained yellow, down red, "
          "reserved magenta); GPU %: on allocated nodes red < 15, yellow < 50, green; dim elsewhere")


def _util_style(u: float | None, state: str = "allocated") -> str:
    if u is None or state not in BUSY_STATES:
        return "dim"
    return "red" if u < 15 else ("yellow" if u < 50 else "green")


NAMED_ROWS = 3  # more nodes than 3 rows of named cells hold: the compact grid
COMPACT_MAX = 32  # nodes per compact row at most (a scalable unit of the reference site)
STATE_CHAR = {"idle": ".", "mixed": "m", "allocated": "A", "completing": "c", "planned": "p", "draining": "d",
              "drained": "D", "down": "X", "reserved": "R"}
OTHER_CHAR = "?"


def util_char(u: float | None) -> str:
    """GPU utilisation in tens: 0 for 0-9 %, 9 for 90-100 %; - when Prometheus did not say."""
    return "-" if u is None else str(max(0, min(9, int(u // 10))))


def compact_legend() -> Text:
    """What the two characters of a compact cell mean, the letters in their state's colour."""
    t = Text("each node: state, then GPU % in tens (0 = 0-9 %, 9 = 90-100 %, - unknown; on busy nodes red < 15, "
             "yellow < 50): ", style="dim")
    for st, ch in [*STATE_CHAR.items(), ("other", OTHER_CHAR)]:
        t.append(ch, style=STATE_STYLE.get(st, "white"))
        t.append(f" {st}  ", style="dim")
    t.rstrip()
    return t


def _named_grid(agg: Aggregate, util: dict[str, float], names: list[str], cols: int, cell_w: int) -> Table:
    grid = Table.grid(padding=(0, 1))
    for _ in range(cols):
        grid.add_column(width=cell_w - 1, no_wrap=True)
    cells = []
    for name in names:
        st = agg.node_state[name][0]
        u = util.get(name)
        cell = Text(f"{name:<9}", style=STATE_STYLE.get(st, "white"))
        cell.append(" --" if u is None else f"{u:4.0f}%", style=_util_style(u, st))
        cells.append(cell)
    for i in range(0, len(cells), cols):
        grid.add_row(*cells[i:i + cols])
    return grid


def compact_rows(names: list[str], width: int) -> tuple[int, list[tuple[str, list[str]]]]:
    """(label width, [(hostlist label, nodes)]): as many nodes a row as fit `width` (a multiple
    of 8 where it can be, at most COMPACT_MAX), each row labelled by the hostlist it covers."""
    avail = width - 4  # the panel's border and padding
    for per in (COMPACT_MAX, 24, 16, 8, 4, 2, 1):
        rows = [(compress(names[i:i + per]), names[i:i + per]) for i in range(0, len(names), per)]
        label_w = min(LABEL_MAX, max(len(label) for label, _ in rows))
        if label_w + 1 + 3 * per <= avail or per == 1:
            return label_w, rows
    raise AssertionError("unreachable")


LABEL_MAX = 24


def _compact_grid(agg: Aggregate, util: dict[str, float], names: list[str], width: int) -> Table:
    label_w, rows = compact_rows(names, width)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=label_w, no_wrap=True, overflow="ellipsis")
    grid.add_column(no_wrap=True)
    for label, row in rows:
        cells = Text()
        for k, name in enumerate(row):
            st = agg.node_state[name][0]
            u = util.get(name)
            if k:
                cells.append(" ")
            cells.append(STATE_CHAR.get(st, OTHER_CHAR), style=STATE_STYLE.get(st, "white"))
            cells.append(util_char(u), style=_util_style(u, st))
        grid.add_row(Text(label, style="bold"), cells)
    return grid


def util_query(site) -> tuple[str, str]:
    """(PromQL, node label) of each node's mean GPU utilisation for the site's GPU source."""
    if site.monitor.gpu_source == "dcgm":
        return "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", "Hostname"
    return "avg by (node) (slurmadm_gpu_utilization_percent)", "node"


def build_frame(site, frame: Frame, width: int = 120):
    agg: Aggregate = aggregate(frame.snap)
    title = Text.assemble((f"slurmadm top: {site.cluster.name}", "bold"),
                          f"  {time.strftime('%H:%M:%S', time.localtime(frame.at or time.time()))}",
                          "  q quits")
    counts = {}
    for st, _owner, _reason in agg.node_state.values():
        counts[st] = counts.get(st, 0) + 1
    summary = Text("  ".join(f"{st} {n}" for st, n in sorted(counts.items())))
    names = sorted(agg.node_state)
    cell_w = 16
    cols = max(1, min(12, width // cell_w))
    if len(names) <= NAMED_ROWS * cols:  # a few nodes: a named cell each
        grid, grid_title, legend = _named_grid(agg, frame.util, names, cols, cell_w), \
            "nodes (state colour, mean GPU utilisation)", Text(LEGEND, style="dim")
    else:  # many (128 in 80x24): two characters a node, rows labelled by their hostlist
        grid, grid_title, legend = _compact_grid(agg, frame.util, names, width), \
            f"{len(names)} nodes: state, GPU % in tens", compact_legend()
    drains = Table(title="drains", title_justify="left", expand=False, header_style="bold")
    for col, w in (("nodes", 9), ("state", 8), ("owner", 8), ("reason", 24)):
        drains.add_column(col, overflow="fold", min_width=w)
    by_node = {n.name: n for n in frame.snap.nodes}
    # drained nodes that agree (state, owner, reason with the node's own name as <node>): one row
    for g in fold((name, (st, owner, neutral(by_node[name].reason[:90], name)))
                  for name, (st, owner, _r) in sorted(agg.node_state.items()) if owner):
        drains.add_row(escape(g.hostlist), g.key[0], g.key[1], escape(g.named(g.key[2])))
    queue = Table(title="queue", title_justify="left", header_style="bold")
    queue.add_column("partition", min_width=9)
    queue.add_column("reason", min_width=14)
    queue.add_column("jobs", justify="right")
    for part, n in sorted(agg.running.items()):
        queue.add_row(escape(part), "running", str(n))
    for (part, reason), n in sorted(agg.pending.items(), key=lambda kv: -kv[1]):
        queue.add_row(escape(part), escape(reason), str(n))
    projects = Table(title="projects near quota", title_justify="left", header_style="bold")
    for col in ("project", "GPUs", "quota", "use"):
        projects.add_column(col, justify="right" if col != "project" else "left", min_width=12 if col == "project" else 5)
    for proj in site.projects:
        if not proj.gpu_quota:
            continue
        used = agg.project_gpus.get(proj.name, 0)
        frac = used / proj.gpu_quota
        if frac >= 0.8:
            projects.add_row(escape(proj.name), str(used), str(proj.gpu_quota),
                             Text(f"{frac:.0%}", style="red" if frac >= 1 else "yellow"))
    parts = [title, summary, Panel(grid, title=grid_title, expand=False), legend]
    for table in (drains, queue, projects):  # an empty table says so
        if not table.row_count:
            table.add_row("none", *[""] * (len(table.columns) - 1))
    if width >= 150:
        side = Table.grid(padding=(0, 3))
        side.add_row(drains, queue, projects)
        parts.append(side)
    else:
        parts += [drains, queue, projects]
    if frame.error:
        parts.append(Text(f"warning: {frame.error}", style="yellow"))
    return RGroup(*parts)


def read_frame(site, source, prometheus_url: str | None) -> Frame:
    from ..errors import SlurmadmError

    snap = source.read()
    util: dict[str, float] = {}
    error = ""
    if prometheus_url:
        from ..monitor.stack import prom_query

        try:
            expr, label = util_query(site)
            for r in prom_query(prometheus_url, expr, timeout=2.0):
                util[r["metric"].get(label, "")] = float(r["value"][1])
        except SlurmadmError as exc:
            error = f"no GPU utilisation ({exc})"
    return Frame(snap, util, error, time.time())
