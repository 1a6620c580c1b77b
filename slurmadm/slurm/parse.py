"""Parsers for Slurm's output across releases. Odd output raises UnreachableError naming the
command (the CLI turns it into one line, exit 3) instead of a traceback.

Shapes handled (real samples of each: tests/fixtures/slurm/<release>/):
- `sinfo --json` 22.05 (openapi v0.0.38): nodes[] with `state` a lower-case string and
  `state_flags` a list; `reason`, `reason_set_by_user`; `partitions` a list; `features` a string.
- `scontrol --json show node` 23.11+ (data_parser v0.0.40+): nodes[] with `state` a list of
  upper-case flags (["IDLE", "DRAIN"]), `reason` a string, `features` a list; numbers possibly
  wrapped as {set, infinite, number}.
- `sinfo --json` 23.11+: sinfo[] rows, one per partition and group of alike nodes (with `-N` too),
  reason at `reason.description`/`reason.user` (26.05: the user at the row's `reason_set_by_user`),
  sizes as {minimum, maximum}.
- `scontrol show node -o` (every release): one line per node of Key=Value pairs, ending with the
  free-text Reason (`<text> [<user>@<time>]`), Comment and Extra.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import UnreachableError
from .model import NodeInfo, Reservation, SlurmdHardware
from .nodestate import decode


class SlurmErrors(UnreachableError):
    """A JSON answer with Slurm's "errors" and no nodes (22.05's `sinfo --json` when it could not
    load them: the cause is not in it)."""

VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int]:
    m = VERSION_RE.search(text)
    if not m:
        raise UnreachableError(f"cannot read a Slurm version from {text.strip()[:80]!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def unwrap_number(value: Any) -> int | float | None:
    """24.11 wraps numbers as {"set": true, "infinite": false, "number": 5}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value.get("number")
    return value


_STATE_CACHE: dict[tuple[Any, Any], tuple[str, frozenset[str]]] = {}


def split_state(state: Any, flags: Any = None) -> tuple[str, frozenset[str]]:
    """Normalise a node state from any release to (base, flags). A cluster has a handful of
    distinct state spellings over thousands of nodes: each is split once (cached)."""
    try:
        key = (tuple(state) if isinstance(state, list) else state, tuple(flags) if flags else ())
        got = _STATE_CACHE.get(key)
    except TypeError:  # an unhashable element (odd output): split without the cache
        return _split_state(state, flags)
    if got is None:
        got = _split_state(state, flags)
        if len(_STATE_CACHE) < 4096:
            _STATE_CACHE[key] = got
    return got


def _split_state(state: Any, flags: Any = None) -> tuple[str, frozenset[str]]:
    return decode(state, flags)  # Slurm's own rules, as data: slurmadm/slurm/nodestate.py


def _text(value: Any) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):  # 24.11 reason sometimes {"description": ...}
        return str(value.get("description") or value.get("reason") or "")
    return str(value)


_LIST_CACHE: dict[Any, tuple[str, ...]] = {}


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated string or a list (features, partitions) as a tuple; the few distinct
    values a cluster has are converted once (cached)."""
    if not value:
        return ()
    try:
        key = tuple(value) if isinstance(value, list) else value
        got = _LIST_CACHE.get(key)
    except TypeError:
        key, got = None, None
    if got is None:
        got = tuple(f for f in value.split(",") if f) if isinstance(value, str) else tuple(str(f) for f in value)
        if key is not None and len(_LIST_CACHE) < 4096:
            _LIST_CACHE[key] = got
    return got


def node_from_json(obj: dict[str, Any]) -> NodeInfo:
    get = obj.get
    base, flags = split_state(get("state"), get("state_flags"))
    reason = get("reason")
    cpus, memory, changed = get("cpus"), get("real_memory"), get("reason_changed_at")
    return NodeInfo(
        name=str(get("name") or get("hostname") or ""),
        state=base,
        flags=flags,
        reason=reason if type(reason) is str else _text(reason),
        reason_user=_text(get("reason_set_by_user")),
        reason_time=float((unwrap_number(changed) if type(changed) is dict else changed) or 0),
        gres=_text(get("gres")),
        gres_used=_text(get("gres_used")),
        partitions=_names(get("partitions")),
        features=_names(get("features") or get("active_features")),
        cpus=int((unwrap_number(cpus) if type(cpus) is dict else cpus) or 0),
        real_memory=int((unwrap_number(memory) if type(memory) is dict else memory) or 0),
    )


BIG = 1 << 20  # bytes of Slurm output from which the bulk paths below (orjson, GC paused) apply


@contextmanager
def gc_paused(big: bool = True) -> Iterator[None]:
    """No cyclic garbage collection while a large listing becomes objects: the parse makes no
    cycles, and the collector would otherwise traverse the growing heap again and again
    (measured: about a third of a 10,000-node, 50,000-job head read). Collection resumes after."""
    if not big or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def json_loads(text: str) -> Any:
    """json.loads; a large document (a 10,000-node listing is tens of MiB) through orjson when
    it is installed: several times faster, and its errors are json.JSONDecodeError too."""
    if len(text) > BIG:
        try:
            import orjson
        except ImportError:
            pass
        else:
            return orjson.loads(text)
    return json.loads(text)


def nodes_from_json(text: str, command: str) -> list[NodeInfo]:
    with gc_paused(len(text) > BIG):
        return _nodes_from_json(text, command)


def _nodes_from_json(text: str, command: str) -> list[NodeInfo]:
    try:
        data = json_loads(text)
    except json.JSONDecodeError as exc:
        raise UnreachableError(f"{command}: output is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UnreachableError(f"{command}: unexpected JSON (top level is {type(data).__name__})")
    errors = data.get("errors")
    if isinstance(errors, list) and errors and not data.get("nodes") and not data.get("sinfo"):
        # 22.05's `sinfo --json` when slurmctld does not answer: exit 0, no nodes, and
        # "errors": [{"error": "Unspecified error", "errno": -1}] (tests/fixtures/slurm/22.05/
        # sinfo-no-slurmctld.json). That is no answer, not an empty cluster.
        raise SlurmErrors(f"{command}: no nodes, errors: {'; '.join(map(_json_error, errors))}")
    try:
        if "nodes" in data and isinstance(data["nodes"], list):
            return [node_from_json(n) for n in data["nodes"] if isinstance(n, dict)]
        if "sinfo" in data and isinstance(data["sinfo"], list):
            return _nodes_from_sinfo_rows(data["sinfo"])
    except (AttributeError, TypeError, ValueError) as exc:  # a field of an unexpected type
        raise UnreachableError(f"{command}: unexpected JSON ({exc})") from None
    raise UnreachableError(f"{command}: unexpected JSON (no 'nodes' list)")


def _json_error(e: Any) -> str:
    """One entry of a Slurm JSON "errors" list: 22.05 {error, errno}; later {description, error, error_number, ...}."""
    if not isinstance(e, dict):
        return str(e)
    text = str(e.get("description") or e.get("error") or "error")
    num = e.get("error_number", e.get("errno"))
    return text if num is None else f"{text} (errno {num})"


def _nodes_from_sinfo_rows(rows: list[Any]) -> list[NodeInfo]:
    """23.11+ `sinfo --json`: one row per partition and group of alike nodes (same state, reason,
    ...), so a node in two partitions appears in two rows."""
    objs: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not isinstance(row, dict):
            continue
        partition = (row.get("partition") or {}).get("name")
        for name in (row.get("nodes") or {}).get("nodes") or []:
            obj = objs.get(name)
            if obj is None:
                reason = row.get("reason") or {}
                obj = objs[name] = {
                    "name": name,
                    "state": (row.get("node") or {}).get("state"),
                    "reason": reason.get("description"),
                    # 26.05 moved the user out of `reason` to the row's reason_set_by_user
                    "reason_set_by_user": reason.get("user") or row.get("reason_set_by_user"),
                    "reason_changed_at": reason.get("time"),
                    "gres": (row.get("gres") or {}).get("total"),
                    "gres_used": (row.get("gres") or {}).get("used"),
                    "features": (row.get("features") or {}).get("total"),
                    "partitions": [],
                    "cpus": _group_value(row.get("cpus")),
                    "real_memory": _group_value(row.get("memory")),
                }
            if partition and partition not in obj["partitions"]:
                obj["partitions"].append(partition)
    return [node_from_json(obj) for obj in objs.values()]


def _group_value(minmax: Any) -> Any:
    """A grouped row's {"minimum": a, "maximum": b}: the per-node value when the group agrees."""
    if isinstance(minmax, dict) and minmax.get("minimum") == minmax.get("maximum"):
        return minmax.get("maximum")
    return None


# `scontrol show node -o` ends with these free-text fields, each optional, in this order
# (src/api/node_info.c, slurm_sprint_node_table): Reason, Comment, Extra, then (23.02+ cloud
# nodes) InstanceId and InstanceType, then (24.11+) ReservationName. Values may hold spaces and
# "=" (`Reason=slurmadm: ecc: GPU5 DBE=2 [prolog] [root@2026-...]`, `Extra=ticket=4712 vendor RMA`).
NODE_TEXT_TAIL = ("Reason", "Comment", "Extra", "InstanceId", "InstanceType", "ReservationName")
_REASON_BY = re.compile(r"^(.*?)\s*\[([^@\]\s]+)@([^\]]*)\]$")  # "<reason> [<user>@<time>]"


def parse_kv_line(line: str, tail: tuple[str, ...] = ()) -> dict[str, str]:
    """One `scontrol show ... -o` line -> dict. A value runs until the next ` Key=` (values may
    contain spaces); the keys in `tail` are free text at the end of the line, in that order, and
    each runs until the next of them."""
    cut = len(line)
    for key in tail:
        m = re.search(rf"(?:^|\s){key}=", line)
        if m:
            cut = min(cut, m.start())
    out = _split_kv(line[:cut], r"[A-Za-z][A-Za-z0-9_/:]*")
    if tail:
        out.update(_split_kv(line[cut:], "|".join(tail)))
    return out


def _split_kv(text: str, key_pattern: str) -> dict[str, str]:
    out: dict[str, str] = {}
    matches = list(re.finditer(rf"(?:^|\s)({key_pattern})=", text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[m.group(1)] = text[m.end() : end].strip()
    return out


def nodes_from_scontrol_text(text: str) -> list[NodeInfo]:
    nodes = []
    for line in text.splitlines():
        if not line.strip().startswith("NodeName="):
            continue
        kv = parse_kv_line(line.strip(), NODE_TEXT_TAIL)
        reason = kv.get("Reason", "")
        user, when = "", 0.0
        m = _REASON_BY.match(reason)
        if m:
            reason, user = m.group(1), m.group(2)
            try:
                when = dt.datetime.fromisoformat(m.group(3)).timestamp()  # local time, as scontrol prints
            except ValueError:
                pass
        base, flags = split_state(kv.get("State", ""))
        nodes.append(
            NodeInfo(
                name=kv.get("NodeName", ""),
                state=base,
                flags=flags,
                reason=reason,
                reason_user=user,
                reason_time=when,
                gres=kv.get("Gres", ""),
                gres_used=kv.get("GresUsed", ""),  # with `scontrol -d`
                partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
                features=tuple(f for f in kv.get("AvailableFeatures", "").split(",") if f and f != "(null)"),
                cpus=int(kv.get("CPUTot", "0") or 0),
                real_memory=int(kv.get("RealMemory", "0") or 0),
            )
        )
    return nodes


def parse_slurmd_c(text: str) -> SlurmdHardware:
    """`slurmd -C`: `NodeName=x CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56
    ThreadsPerCore=2 RealMemory=2063000` then `UpTime=...`."""
    kv = dict(re.findall(r"(\w+)=(\S+)", text))
    try:
        return SlurmdHardware(
            node_name=kv["NodeName"],
            cpus=int(kv["CPUs"]),
            sockets=int(kv.get("Boards", "1")) * int(kv["SocketsPerBoard"]),
            cores_per_socket=int(kv["CoresPerSocket"]),
            threads_per_core=int(kv["ThreadsPerCore"]),
            real_memory=int(kv["RealMemory"]),
        )
    except (KeyError, ValueError):
        raise UnreachableError(f"slurmd -C: unexpected output {text.strip()[:120]!r}") from None


def parse_reservations(text: str) -> list[Reservation]:
    """`scontrol show reservation -o` (every release): one line per reservation."""
    out = []
    for line in text.splitlines():
        kv = parse_kv_line(line.strip())
        if "ReservationName" not in kv:
            continue
        nodes = kv.get("Nodes", "")
        out.append(Reservation(name=kv["ReservationName"], nodes="" if nodes == "(null)" else nodes,
                               users=kv.get("Users", ""),
                               flags=frozenset(f for f in kv.get("Flags", "").split(",") if f),
                               state=kv.get("State", "")))
    return out
