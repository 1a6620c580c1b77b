"""The generated reference pages of the documentation site: {path under docs/: Markdown}.

slurmadm/docgen/mkdocs_hook.py adds them to the MkDocs build; tests/unit/docs/ check that they cover
every command and every site key. Nothing here is written into the source tree."""

from __future__ import annotations

from . import catalog, cli, sitekeys

GENERATED = "<!-- generated from the code by slurmadm/docgen; do not edit -->"


def _md(text: str) -> str:
    return cli.md_text(text)


def command_pages(commands: list[cli.Command] | None = None) -> dict[str, str]:
    commands = commands if commands is not None else cli.walk()
    out = {"reference/cli/index.md": cli.markdown_index(commands)}
    for g, cs in cli.groups(commands).items():
        out[f"reference/cli/{g}.md"] = cli.markdown_group(g, cs)
    return out


def metrics_page() -> str:
    lines = ["# Metrics", "", GENERATED, "",
             "Every series the exporters write (`slurmadm exporter --mode node` on the compute nodes, "
             "`--mode head` on the head), with its HELP text. Names follow Prometheus conventions and "
             "dcgm-exporter's meanings; GPU series carry `gpu`, `uuid`, and with a job on the GPU `jobid`, "
             "`user`, `account`. Both exporters also export `process_*` and pass `promtool check metrics`.", "",
             "| metric | exporter | what it is |", "| --- | --- | --- |"]
    for m in catalog.metrics():
        lines.append(f"| `{m.name}` | {m.exporter} | {_md(m.help)} |")
    return "\n".join(lines) + "\n"


def alerts_page() -> str:
    lines = ["# Alerts", "", GENERATED, "",
             "The alert rules `slurmadm monitor rules` writes for the site, each with its runbook "
             "(`monitor.runbook_base_url` + `/<Alert>.md` in the alert's `runbook_url`). Thresholds and `for` "
             "durations come from `[monitor]`; the values below are the example site's. *GPU source* says "
             "under which `monitor.gpu_source` the rule exists.", ""]
    for r, sources in catalog.alerts():
        lines += [f"## {r.name}", "",
                  f"- severity: **{r.severity}**; group `{r.group}`; for `{r.for_ or '0s'}`; GPU source: "
                  f"{', '.join(sources)}",
                  f"- summary: {_md(r.summary)}",
                  f"- runbook: [{r.name}](../runbooks/{r.name}.md)", ""]
        if r.description and r.description != r.summary:
            lines += [_md(r.description), ""]
        lines += ["```promql", r.expr.strip(), "```", ""]
    return "\n".join(lines)


def drain_reasons_page() -> str:
    lines = ["# Drain reasons", "", GENERATED, "",
             "Every drain slurmadm sets has the reason `slurmadm: <check-id>: <detail> [<context>]` "
             "(`slurmadm/slurm/ownership.py`, at most 240 characters). slurmadm only resumes or re-reasons a "
             "drain of exactly that shape; an admin who edits the reason (`... -- admin: RMA`) makes the "
             "drain theirs. `sinfo -R` cuts reasons at 20 characters: use `sinfo -R -o \"%70E %9u %19H %N\"` "
             "or `slurmadm health status`.", "",
             "| check id | context | set by |", "| --- | --- | --- |"]
    for cid, ctx, why in catalog.drain_reasons():
        lines.append(f"| `{cid}` | {ctx} | {_md(why)} |")
    lines += ["", "Health resumes only drains whose check id is a health check, after "
              "`health.resume_after_clean_runs` clean runs; a burn-in drain is lifted only by a passing "
              "burn-in; an alert drain by the alert resolving and clean health verdicts.", ""]
    return "\n".join(lines)


def exit_codes_page() -> str:
    files, ports = catalog.files_and_ports()
    lines = ["# Exit codes, files and ports", "", GENERATED, "", "## Exit codes", "",
             "| code | meaning |", "| --- | --- |"]
    lines += [f"| {c} | {_md(t)} |" for c, t in catalog.exit_codes()]
    lines += ["", "Errors are one line on stderr (`slurmadm: error: ...`), never a traceback.", "",
              "## Files", "", "Paths a site uses, as site keys with their defaults (see [site.toml keys](site.md)). "
              "Besides them: `/etc/slurmadm/site.toml` (the site file; `$SLURMADM_SITE` or `--site` name another), "
              "`slurmadm.env` next to the hooks, man pages in `/usr/local/share/man/man1/slurmadm*.1` and "
              "completion in `/etc/bash_completion.d/slurmadm` and `/usr/local/share/zsh/site-functions/_slurmadm` "
              "(installed by `slurmadm deploy apply --head`).", "",
              "| key | default | what |", "| --- | --- | --- |"]
    lines += [f"| `{k.path}` | {_md(k.default)} | {_md(k.description)} |" for k in files]
    lines += ["", "## Ports", "", "| key | default | what |", "| --- | --- | --- |"]
    lines += [f"| `{k.path}` | {_md(k.default)} | {_md(k.description)} |" for k in ports]
    lines += ["", "The dev cluster's ports (127.0.0.1 from `--port-base`, default 17000) are described in the "
              "[tutorial](../tutorial.md#ports).", ""]
    return "\n".join(lines)


def site_page() -> str:
    return sitekeys.markdown()


def all_pages() -> dict[str, str]:
    out = command_pages()
    out["reference/site.md"] = site_page()
    out["reference/metrics.md"] = metrics_page()
    out["reference/alerts.md"] = alerts_page()
    out["reference/drain-reasons.md"] = drain_reasons_page()
    out["reference/exit-codes.md"] = exit_codes_page()
    out["reference/xid.md"] = xid_page()
    return out


def xid_page() -> str:
    """NVIDIA's Xid catalog as slurmadm keeps it (slurmadm/health/data/xid_catalog.csv)."""
    import csv

    from ..health import xid as _xid  # noqa: F401  (the package that reads the data)

    path = catalog.PKG / "health" / "data" / "xid_catalog.csv"
    text = path.read_text()
    header = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    lines = ["# XID catalog", "", GENERATED, "",
             "The data behind the `xid` health check and the `GpuXid*` alerts: what NVIDIA's Xid catalog says "
             "to do right away for each XID. From `slurmadm/health/data/xid_catalog.csv`, whose header says:", "",
             *[f"> {_md(h)}" for h in header], "",
             "| XID | mnemonic | description | B100/B200 | immediate action | investigatory |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['xid']} | `{r['mnemonic']}` | {_md(r['description'])} | {r['applies_b100']} | "
                     f"{r['immediate'] or '-'} | {_md(r['investigatory'] or '-')} |")
    lines += ["", "The NVLink5 sub-codes of XIDs 144-150 are decoded from `xid_nvlink5.csv` (the catalog's "
              "\"XID 144-150 Decode\" sheet).", ""]
    return "\n".join(lines)
