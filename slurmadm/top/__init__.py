"""`slurmadm top`: a live terminal view for the head node.

One frame = one Slurm read (the head exporter's SlurmHead: node listing, squeue, sshare) plus,
when Prometheus answers, each node's mean GPU utilisation. `build_frame` is pure (a Snapshot and
the utilisation in, a rich renderable out), so the layout is tested without a terminal; the CLI
drives it with rich's Live on the alternate screen (no flicker) and quits on `q`.

The node grid: a named cell per node (name in its state's colour, GPU %) while the nodes fit in
NAMED_ROWS rows; past that (the reference site's 128 nodes in 80x24 or 200x60) two characters a
node, a state letter and the GPU % in tens, rows of up to COMPACT_MAX nodes labelled by the
hostlist they cover, so the whole fleet stays on the first screen. Drains that agree (state,
owner, reason) are one row with their hostlist. Nodes in repair (with a hardware incident not
closed in the store, or drained by `slurmadm repair`: reason `slurmadm: repair: ...`) have their
own letter and style in the grid and the legend.

The sections below the grid (drains, queue, projects near quota) carry their title in their
header row, an empty one is one line (`queue: none`), and given the terminal's height the frame
is trimmed to it: each section keeps its header and as many rows as the lines left allow, the
rest counted in a `+N more` row, so the whole frame fits (128 nodes with a queue in 80x24).
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
from ..slurm.ownership import reason_check_id

STATE_STYLE = {"idle": "green", "mixed": "cyan", "allocated": "blue", "completing": "blue", "draining": "yellow",
               "drained": "yellow", "down": "bold red", "reserved": "magenta"}


@dataclass
class Frame:
    snap: Snapshot
    util: dict[str, float]  # node -> mean GPU utilisation %, when Prometheus answered
    error: str = ""
    at: float = 0.0
    # nodes with a hardware incident not closed (slurmadm repair), read from the store each frame
    incidents: frozenset[str] = frozenset()


# Utilisation is coloured only where jobs hold the node: an idle or drained node at 0 % is as it
# should be, not an alarm.
BUSY_STATES = frozenset({"allocated", "mixed", "completing"})
# A node in repair: drained by `slurmadm repair` (its check id in the reason: `slurmadm: repair: <step>: ...`,
# lemons and RMA candidates included). Shown as its own state, whatever Slurm's drain state.
REPAIR_CHECK_ID = "repair"
REPAIR = "repair"
STATE_STYLE[REPAIR] = "bold black on yellow"
LEGEND = ("node name: state colour (idle green, mixed cyan, allocated blue, draining/drained yellow, down red, "
          "reserved magenta, in repair black on yellow); GPU %: on allocated nodes red < 15, yellow < 50, green; "
          "dim elsewhere")


INCIDENT_OPEN = "incident open: slurmadm repair status"  # a node in repair that nobody drained (yet)


def in_repair(reason: str) -> bool:
    return reason_check_id(reason) == REPAIR_CHECK_ID


def _util_style(u: float | None, state: str = "allocated") -> str:
    if u is None or state not in BUSY_STATES:
        return "dim"
    return "red" if u < 15 else ("yellow" if u < 50 else "green")


NAMED_ROWS = 3  # more nodes than 3 rows of named cells hold: the compact grid
COMPACT_MAX = 32  # nodes per compact row at most (a scalable unit of the reference site)
STATE_CHAR = {"idle": ".", "mixed": "m", "allocated": "A", "completing": "c", "planned": "p", "draining": "d",
              "drained": "D", "down": "X", "reserved": "R", REPAIR: "F"}  # F: being fixed (R is taken)
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
        t.append(f" {'in repair' if st == REPAIR else st}  ", style="dim")
    t.rstrip()
    return t


def _named_grid(states: dict[str, str], util: dict[str, float], names: list[str], cols: int, cell_w: int) -> Table:
    grid = Table.grid(padding=(0, 1))
    for _ in range(cols):
        grid.add_column(width=cell_w - 1, no_wrap=True)
    cells = []
    for name in names:
        st = states[name]
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


def _compact_grid(states: dict[str, str], util: dict[str, float], names: list[str], width: int) -> Table:
    label_w, rows = compact_rows(names, width)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=label_w, no_wrap=True, overflow="ellipsis")
    grid.add_column(no_wrap=True)
    for label, row in rows:
        cells = Text()
        for k, name in enumerate(row):
            st = states[name]
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


class Section:
    """A table below the grid: its title is the first column's header (that column holds what the
    title names: drained nodes, partitions, projects), rows of cells; one line
    (`title: none`) when empty; cut to `limit` rows with a `+N more` row in their place."""

    def __init__(self, title: str, columns: list[tuple[str, dict]]):
        self.title = title
        self.columns = columns
        self.rows: list[tuple] = []

    def lines(self, limit: int | None = None) -> int:
        return 1 if not self.rows else 1 + len(self.rows) if limit is None else 1 + min(len(self.rows), limit)

    def render(self, limit: int | None = None):
        if not self.rows:
            return Text(f"{self.title}: none")
        if limit == 0:  # no room for even one row
            return Text(f"{self.title}: {len(self.rows)} rows (a taller terminal shows them)", style="dim")
        table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
        for k, (col, kw) in enumerate(self.columns):
            table.add_column(self.title if k == 0 else col, **kw)
        rows = self.rows
        if limit is not None and len(rows) > limit:
            keep = max(0, limit - 1)
            rows = [*rows[:keep], (Text(f"+{len(self.rows) - keep} more", style="dim"),
                                   *[""] * (len(self.columns) - 1))]
        for row in rows:
            table.add_row(*row)
        return table


def _fit(budget: int, sections: list[Section]) -> list[int | None]:
    """Rows each section may show within `budget` lines (None: all): the header of each, then a
    row at a time to each in turn while lines are left."""
    if sum(s.lines() for s in sections) <= budget:
        return [None] * len(sections)
    limits = [0] * len(sections)
    left = budget - len(sections)  # one line each: an empty section's line, or a header
    while left > 0:
        grew = False
        for k, s in enumerate(sections):
            if left > 0 and limits[k] < len(s.rows):
                limits[k] += 1
                left -= 1
                grew = True
        if not grew:
            break
    return limits


def _lines(renderable, width: int) -> int:
    from rich.console import Console

    console = Console(width=width, color_system=None, file=_Null(), legacy_windows=False)
    return len(console.render_lines(renderable, console.options.update(width=width), pad=False))


class _Null:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def build_frame(site, frame: Frame, width: int = 120, height: int | None = None):
    """The frame for a terminal `width` columns wide; with `height`, trimmed to that many lines."""
    agg: Aggregate = aggregate(frame.snap)
    title = Text.assemble((f"slurmadm top: {site.cluster.name}", "bold"),
                          f"  {time.strftime('%H:%M:%S', time.localtime(frame.at or time.time()))}",
                          "  q quits")
    by_node = {n.name: n for n in frame.snap.nodes}
    states = {name: REPAIR if (owner and in_repair(by_node[name].reason)) or name in frame.incidents else st
              for name, (st, owner, _r) in agg.node_state.items()}
    counts: dict[str, int] = {}
    for st in states.values():
        counts[st] = counts.get(st, 0) + 1
    summary = Text("  ".join(f"{'in repair' if st == REPAIR else st} {n}" for st, n in sorted(counts.items())))
    names = sorted(agg.node_state)
    cell_w = 16
    cols = max(1, min(12, width // cell_w))
    if len(names) <= NAMED_ROWS * cols:  # a few nodes: a named cell each
        grid, grid_title, legend = _named_grid(states, frame.util, names, cols, cell_w), \
            "nodes (state colour, mean GPU utilisation)", Text(LEGEND, style="dim")
    else:  # many (128 in 80x24): two characters a node, rows labelled by their hostlist
        grid, grid_title, legend = _compact_grid(states, frame.util, names, width), \
            f"{len(names)} nodes: state, GPU % in tens", compact_legend()
    # fitted to a terminal's height, a long reason is cut (`health status` prints it whole) rather
    # than wrapped over lines the queue needs
    drains = Section("drains", [("nodes", {"overflow": "fold", "min_width": 9}), ("state", {"min_width": 8}),
                                ("owner", {"min_width": 8}), ("reason", {"overflow": "fold", "min_width": 24})])
    # drained nodes that agree (state, owner, reason with the node's own name as <node>): one row
    for g in fold((name, (states[name] if states[name] == REPAIR else st, owner,
                          neutral(by_node[name].reason[:90] or (INCIDENT_OPEN if states[name] == REPAIR else ""),
                                  name)))
                  for name, (st, owner, _r) in sorted(agg.node_state.items()) if owner or states[name] == REPAIR):
        state = Text("in repair", style=STATE_STYLE[REPAIR]) if g.key[0] == REPAIR else g.key[0]
        drains.rows.append((escape(g.hostlist), state, g.key[1], escape(g.named(g.key[2]))))
    if height is not None and drains.rows:
        # fitted to a terminal's height: the hostlist, state and owner whole, a long reason cut
        # (`health status` prints it whole) rather than wrapped over lines the queue needs
        taken = 0
        for k, title in enumerate(("drains", "state", "owner")):
            w = max(len(title), *(len(str(r[k])) for r in drains.rows))
            drains.columns[k] = (drains.columns[k][0], {"width": w, "no_wrap": True})
            taken += w + 2  # and its padding
        drains.columns[3] = ("reason", {"overflow": "ellipsis", "no_wrap": True,
                                        "max_width": max(10, width - taken - 2)})
    queue = Section("queue", [("partition", {"min_width": 9}), ("reason", {"min_width": 14}),
                              ("jobs", {"justify": "right"})])
    for part, n in sorted(agg.running.items()):
        queue.rows.append((escape(part), "running", str(n)))
    for (part, reason), n in sorted(agg.pending.items(), key=lambda kv: -kv[1]):
        queue.rows.append((escape(part), escape(reason), str(n)))
    projects = Section("projects near quota", [("project", {"min_width": 12}), ("GPUs", {"justify": "right"}),
                                               ("quota", {"justify": "right"}), ("use", {"justify": "right"})])
    for proj in site.projects:
        if not proj.gpu_quota:
            continue
        used = agg.project_gpus.get(proj.name, 0)
        frac = used / proj.gpu_quota
        if frac >= 0.8:
            projects.rows.append((escape(proj.name), str(used), str(proj.gpu_quota),
                                  Text(f"{frac:.0%}", style="red" if frac >= 1 else "yellow")))
    head = [title, summary, Panel(grid, title=grid_title, expand=False), legend]
    warning = [Text(f"warning: {frame.error}", style="yellow")] if frame.error else []
    sections = [drains, queue, projects]
    side = width >= 150
    if height is None:
        limits: list[int | None] = [None] * 3
    else:
        used = sum(_lines(part, width) for part in [*head, *warning])
        budget = height - used
        limits = [None if s.lines() <= budget else max(0, budget - 1) for s in sections] if side \
            else _fit(budget, sections)
        while True:  # a row may wrap (a long reason): measure, and cut the longest section a row more
            total = _lines(_body(sections, limits, side)[0], width) if side else \
                sum(_lines(r, width) for r in _body(sections, limits, side))
            shown = [len(s.rows) if lim is None else min(lim, len(s.rows)) for s, lim in zip(sections, limits)]
            if total <= budget or not any(shown):
                break
            k = max(range(len(sections)), key=lambda i: (shown[i], i))  # ties: the drains last
            limits[k] = shown[k] - 1
    return RGroup(*head, *_body(sections, limits, side), *warning)


def _body(sections: list[Section], limits: list[int | None], side: bool) -> list:
    rendered = [s.render(limit) for s, limit in zip(sections, limits)]
    if not side:
        return rendered
    row = Table.grid(padding=(0, 3))
    row.add_row(*rendered)
    return [row]


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
    return Frame(snap, util, error, time.time(), incident_nodes(site))


def incident_nodes(site) -> frozenset[str]:
    """Nodes with an incident not closed (a leaf switch's are not a node's); none when the store
    cannot be read (top still shows Slurm's view: repair's own drains are marked from their reason)."""
    from ..store import read

    try:
        with read.trusted(site) as r:
            rows = r.query("SELECT DISTINCT node FROM incidents WHERE state != 'closed' AND part_kind != 'leaf'")
    except Exception:  # noqa: BLE001 - no store yet, an old schema, the central store away
        return frozenset()
    return frozenset(str(row["node"]) for row in rows)
