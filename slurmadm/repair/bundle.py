"""The evidence bundle of an RMA case: a tar.gz the vendor gets, root-only, with a manifest.

What it holds (each a file; `manifest.json` lists every file with its sha256 and size, and every
piece that is missing with why):

- `part.json`: the part (serials, UUID, bus id, board part number, VBIOS / firmware, PSID), every
  slot it sat in (stays), and the node's other parts;
- `incidents.json`: the part's incident history on every node it sat in (repair-core's model);
- `xid.txt`: the XID lines (incident evidence and the xid check's recorded details);
- `nvml-counters.json`: the ECC, retired-page and row-remap checks' recorded results (remapped
  rows pending/failure), newest first;
- `sel.json`: the BMC event log (read now through `slurmadm bmc`, else what was recorded);
- `ib-counters.json`: the InfiniBand counters the health runs keep;
- `burnin.json`: the node's burn-in history;
- `health.json`: the node's other failing check results in the window;
- `nvidia-bug-report.log.gz`: NVIDIA's `nvidia-bug-report.sh`, run over the fleet's SSH with a
  time limit, where the node has it.

Nothing secret goes in: the BMC password, the database and store passwords (their files as the
site names them) are looked for in every file and replaced by `<redacted>` (the manifest counts
them); the bundle is written 0600 in a 0700 directory.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile
import time
from collections.abc import Callable
from typing import Any

from .. import __version__
from . import parts as partsmod

NVML_CHECKS = ("ecc-uncorrected", "ecc-corrected", "retired-pages", "row-remap", "gpu-count")
REDACTED = b"<redacted>"
BUG_REPORT_MARK = "@@slurmadm-bug-report"


def secret_files(site) -> list[str]:
    """Files whose contents are secrets the bundle must not carry."""
    out = []
    for obj, attrs in ((getattr(site, "bmc", None), ("password_file",)),
                       (getattr(site, "store", None), ("password_file", "node_password_file")),
                       (getattr(site, "database", None), ("password_file", "storage_pass_file"))):
        for a in attrs:
            v = getattr(obj, a, None) if obj is not None else None
            if isinstance(v, str) and v and "{node}" not in v:
                out.append(v)
    return out


def secrets_of(site) -> list[bytes]:
    found = []
    for path in secret_files(site):
        try:
            with open(path, "rb") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if len(line) >= 4:
                found.append(line)
    return found


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n").encode()


def _node_state(rec, node: str, prefix: str) -> dict:
    return {r["key"]: {"value": r["value"], "ts": r["ts"]} for r in rec.query(
        "SELECT key, value, ts FROM node_state WHERE node=? AND key LIKE ?", (node, prefix + "%"))}


def collect(store, site, case: dict, *, since: float, bug_report: Callable[[str], tuple[bytes | None, str]] | None,
            sel: Callable[[str], tuple[Any, str]] | None, records=None) -> tuple[dict[str, bytes], dict[str, str]]:
    """(files, missing): what goes in the bundle, and each piece that could not be had, with why.
    `bug_report(node)` -> (gzip bytes or None, why); `sel(node)` -> (events or None, why).
    `records`: where health, burn-in and BMC records are (the central store's Reader; default store)."""
    rec = records if records is not None else store
    files: dict[str, bytes] = {}
    missing: dict[str, str] = {}
    node, key = case["node"], case["part_key"]
    stays = partsmod.stays(store, key)
    nodes = list(dict.fromkeys([*(s["node"] for s in stays), node]))
    files["part.json"] = _json({"part": partsmod.find_part(store, key), "stays": stays,
                                "node_parts": partsmod.inventory(store, node)})
    incs = partsmod.incidents_of(store, key)
    files["incidents.json"] = _json(incs)
    if not incs:
        missing["incidents"] = "no incident recorded for this part (repair incidents not ingested, or none)"
    marks = ",".join("?" * len(nodes))
    # XID lines: incident evidence, and what the xid check recorded on each node the part sat in
    xid_lines = []
    for inc in incs:
        for ev in inc.get("evidence") or []:
            text = ev if isinstance(ev, str) else json.dumps(ev, sort_keys=True, default=str)
            if "xid" in text.lower():
                xid_lines.append(text)
    for r in rec.query(f"SELECT ts, node, context, status, detail FROM check_results WHERE check_id='xid' "
                         f"AND status IN ('fail','warn') AND node IN ({marks}) AND ts >= ? ORDER BY ts",
                         (*nodes, since)):
        xid_lines.append(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(r['ts']))} {r['node']} "
                         f"[{r['context']}] {r['status']}: {r['detail']}")
    files["xid.txt"] = ("\n".join(dict.fromkeys(xid_lines)) + "\n").encode() if xid_lines else b""
    if not xid_lines:
        missing["xid"] = "no XID line recorded for this part's nodes in the window"
    nvml = rec.query(f"SELECT ts, node, context, check_id, status, detail, value FROM check_results "
                       f"WHERE check_id IN ({','.join('?' * len(NVML_CHECKS))}) AND node IN ({marks}) AND ts >= ? "
                       f"AND (status != 'pass' OR check_id='row-remap') ORDER BY ts DESC LIMIT 500",
                       (*NVML_CHECKS, *nodes, since))
    files["nvml-counters.json"] = _json({"results": nvml, "gpus": {n: _node_state(rec, n, "health.gpus")
                                                                   for n in nodes}})
    files["health.json"] = _json(rec.query(
        "SELECT ts, context, check_id, status, detail, value FROM check_results WHERE node=? AND ts >= ? "
        "AND status IN ('fail','warn','error') ORDER BY ts DESC LIMIT 500", (node, since)))
    files["ib-counters.json"] = _json({n: _node_state(rec, n, "health.ib-") for n in nodes})
    files["burnin.json"] = _json(rec.query(
        f"SELECT sweep_id, node, why, verdict, job_id, busbw, action, reason, tests, ts FROM burnin_nodes "
        f"WHERE node IN ({marks}) ORDER BY ts", tuple(nodes)))
    # the SEL: read now, else the BMC events slurmadm recorded
    events, why = (None, "BMC not configured for this site") if sel is None else sel(node)
    recorded = rec.query("SELECT ts, action, reason, detail FROM events WHERE target=? AND action LIKE 'bmc.%' "
                           "AND ts >= ? ORDER BY ts", (node, since))
    files["sel.json"] = _json({"read_now": events, "recorded_bmc_events": recorded})
    if events is None:
        missing["sel"] = f"SEL not read now: {why}" + ("" if recorded else "; none recorded")
    # nvidia-bug-report.sh
    if bug_report is None:
        missing["nvidia-bug-report"] = "not asked for (--no-bug-report)"
    else:
        data, why = bug_report(node)
        if data is None:
            missing["nvidia-bug-report"] = why
        else:
            files["nvidia-bug-report.log.gz"] = data
    return files, missing


def bug_report_command(tool: str) -> str:
    """The sh the node runs: NVIDIA's tool into a private temp dir, its gzip back as base64
    between marks; `missing` when the node has no tool."""
    return ("sh -c '" f"if [ ! -x {tool} ]; then echo {BUG_REPORT_MARK} missing; exit 0; fi; "
            "d=$(mktemp -d) || exit 1; "
            f"{tool} --output-file \"$d/nvidia-bug-report.log\" >/dev/null 2>&1; "
            f"if [ -s \"$d/nvidia-bug-report.log.gz\" ]; then echo {BUG_REPORT_MARK} begin; "
            f"base64 \"$d/nvidia-bug-report.log.gz\"; echo {BUG_REPORT_MARK} end; "
            f"else echo {BUG_REPORT_MARK} failed; fi; rm -rf \"$d\"'")


def bug_report_via(remote, tool: str, timeout_s: float) -> Callable[[str], tuple[bytes | None, str]]:
    """nvidia-bug-report.sh on a node over the fleet's SSH (fleet/ssh.py), with a time limit."""
    def run(node: str) -> tuple[bytes | None, str]:
        try:
            replies = remote.run([node], bug_report_command(tool), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - an SSH setup problem: the bundle is still written
            return None, f"ssh: {exc}"
        if not replies:
            return None, "ssh: no reply"
        return parse_bug_report(replies[0])
    return run


def parse_bug_report(reply) -> tuple[bytes | None, str]:
    if reply.exit is None:
        return None, f"node not reachable over SSH ({reply.kind or 'error'}: {reply.error})"
    out = reply.output or ""
    if f"{BUG_REPORT_MARK} missing" in out:
        return None, "nvidia-bug-report.sh is not installed on the node"
    if f"{BUG_REPORT_MARK} begin" not in out or f"{BUG_REPORT_MARK} end" not in out:
        tail = "output cut at the SSH output limit" if f"{BUG_REPORT_MARK} begin" in out else \
            f"nvidia-bug-report.sh failed (exit {reply.exit})"
        return None, tail
    body = out.split(f"{BUG_REPORT_MARK} begin", 1)[1].split(f"{BUG_REPORT_MARK} end", 1)[0]
    try:
        return base64.b64decode("".join(body.split()), validate=True), ""
    except ValueError as exc:
        return None, f"nvidia-bug-report output unreadable ({exc})"


def redact(files: dict[str, bytes], secrets: list[bytes]) -> int:
    """Replace every secret in the files (gzip members too) in place; returns how many were found."""
    count = 0
    for name, data in list(files.items()):
        raw = data
        zipped = name.endswith(".gz")
        if zipped:
            try:
                raw = gzip.decompress(data)
            except OSError:
                zipped = False
        n = 0
        for s in secrets:
            if s and s in raw:
                n += raw.count(s)
                raw = raw.replace(s, REDACTED)
        if n:
            files[name] = gzip.compress(raw) if zipped else raw
            count += n
    return count


def write(bundle_dir: str, case: dict, files: dict[str, bytes], missing: dict[str, str], *,
          secrets: list[bytes] = ()) -> tuple[str, dict]:
    """The tar.gz at <bundle_dir>/rma-<ticket>-<node>-<time>.tar.gz (dir 0700, file 0600); returns
    (path, manifest)."""
    redacted = redact(files, list(secrets))
    now = time.time()
    manifest = {"ticket": case["ticket"], "node": case["node"], "part": {k: case.get(k) for k in
                ("kind", "slot", "part_key", "model", "class", "fault_ts")},
                "created": now, "slurmadm": __version__,
                "files": [{"name": n, "sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}
                          for n, b in sorted(files.items())],
                "missing": [{"name": n, "why": w} for n, w in sorted(missing.items())],
                "redacted": redacted}
    os.makedirs(bundle_dir, mode=0o700, exist_ok=True)
    os.chmod(bundle_dir, 0o700)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    path = os.path.join(bundle_dir, f"rma-{case['ticket']}-{case['node']}-{stamp}.tar.gz")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in [("manifest.json", _json(manifest)), *sorted(files.items())]:
            info = tarfile.TarInfo(f"rma-{case['ticket']}/{name}")
            info.size, info.mtime, info.mode = len(data), int(now), 0o600
            tar.addfile(info, io.BytesIO(data))
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(buf.getvalue())
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path, manifest


def read_manifest(path: str) -> dict:
    with tarfile.open(path, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/manifest.json"))
        return json.loads(tar.extractfile(member).read())


def sel_reader(site) -> Callable[[str], tuple[Any, str]] | None:
    """The BMC's event log, read now through `slurmadm bmc` (None: the site has no BMC password)."""
    from ..fleet import bmc_configured

    if not bmc_configured(site):
        return None

    def read(node: str) -> tuple[Any, str]:
        from ..bmc.fanout import Fleet
        from ..errors import SlurmadmError

        try:
            rows = Fleet(site).run([node], lambda c: [e.to_json() for e in c.bmc.sel()])
        except SlurmadmError as exc:
            return None, str(exc)
        if not rows or not rows[0].ok:
            return None, rows[0].error if rows else "no answer"
        return rows[0].value, ""
    return read


def remote_of(site) -> tuple[Any, str]:
    """(the fleet's SSH, or None and why)."""
    from ..errors import SlurmadmError
    from ..fleet import remote_for

    try:
        return remote_for(site), ""
    except SlurmadmError as exc:
        return None, f"no SSH to the nodes: {exc}"
