"""The generated reference covers the code: every command of the click tree (walked here with
click's own API, not the generator's walker) has its section, and every site.toml key (from
pydantic's JSON schema of the Site model, not the generator's walker) its row with a type, a
default and a description. The man pages render without groff warnings, and `slurmadm deploy
--head` installs them with the completion scripts, once."""

from __future__ import annotations

import re
import shutil
import subprocess

import click
import pytest

from slurmadm.cli import GROUPS, cli
from slurmadm.docgen import cli as doccli
from slurmadm.docgen import pages, sitekeys
from tests.unit.monitor.test_exporter import node_exporter  # noqa: F401 - the fixture
from tests.unit.monitor.test_lint import head_text  # noqa: F401 - the fixture

pytestmark = pytest.mark.unit


def click_commands() -> list[tuple[str, ...]]:
    out = []

    def walk(cmd: click.Command, path: tuple[str, ...], parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path[-1], parent=parent)
        out.append(path)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, (*path, name), ctx)

    walk(cli, ("slurmadm",), None)
    return out


def test_every_command_has_its_section_in_the_reference():
    generated = pages.command_pages()
    assert set(GROUPS) <= {p[len("reference/cli/"):-3] for p in generated}
    missing = []
    for path in click_commands()[1:]:
        page = generated.get(f"reference/cli/{path[1]}.md", "")
        name = " ".join(path)
        if len(path) == 2:
            ok = page.startswith(f"# {name}\n")
        else:
            ok = f"## {name} {{#{'-'.join(path[1:])}}}" in page
        if not ok:
            missing.append(name)
    assert not missing, f"commands missing from the generated reference: {missing}"


def test_every_option_of_every_command_is_in_the_reference():
    generated = pages.command_pages()
    missing = []
    for c in doccli.walk()[1:]:
        page = generated[f"reference/cli/{c.group}.md"]
        cmd = cli
        ctx = None
        for name in c.path[1:]:
            ctx = click.Context(cmd, info_name=name, parent=ctx)
            cmd = cmd.get_command(ctx, name)
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and p.opts[-1] not in page:
                missing.append(f"{c.name} {p.opts[-1]}")
    assert not missing, missing


def schema_keys() -> set[str]:
    """Every key path of site.toml from pydantic's JSON schema of the Site model."""
    from slurmadm.site.model import Site

    schema = Site.model_json_schema()
    defs = schema.get("$defs", {})
    out: set[str] = set()

    def resolve(s: dict) -> list[dict]:
        if "$ref" in s:
            return [defs[s["$ref"].split("/")[-1]]]
        alts = s.get("anyOf") or s.get("oneOf") or s.get("allOf")
        if alts:
            return [x for a in alts for x in resolve(a)]
        return [s]

    def walk(s: dict, prefix: str) -> None:
        for obj in resolve(s):
            for name, sub in obj.get("properties", {}).items():
                key = f"{prefix}.{name}" if prefix else name
                out.add(key)
                for r in resolve(sub):
                    if r.get("type") == "object" and "properties" in r:
                        walk(r, key)
                    elif r.get("type") == "array":
                        for item in resolve(r.get("items", {})):
                            if item.get("type") == "object" and "properties" in item:
                                walk(item, f"{key}[]")
                    elif r.get("type") == "object" and isinstance(r.get("additionalProperties"), dict):
                        for item in resolve(r["additionalProperties"]):
                            if "properties" in item:
                                walk(item, f"{key}.<name>")

    walk(schema, "")
    return out


def test_every_site_key_is_in_the_reference_with_type_default_and_description():
    keys = {k.path: k for k in sitekeys.walk()}
    page = pages.site_page()
    want = schema_keys()
    assert len(want) > 300
    missing = sorted(want - set(keys))
    assert not missing, f"site keys the reference lacks: {missing}"
    not_shown = [k for k in want if f"| `{k}` |" not in page]
    assert not not_shown, not_shown
    undescribed = sorted(k.path for k in keys.values() if not k.description)
    assert not undescribed, (
        "site keys without a description (add a comment above the field in its slurmadm/site/ model, "
        f"or a description= to its Field): {undescribed}")
    for k in keys.values():
        assert k.type, k.path
        assert k.table or k.default, k.path


def test_descriptions_come_from_the_models_source():
    keys = {k.path: k for k in sitekeys.walk()}
    assert "consecutive clean runs" in keys["health.resume_after_clean_runs"].description
    assert keys["cluster.name"].default == "required"
    assert keys["store.path"].default == '"/var/lib/slurmadm/slurmadm.db"'
    assert keys["partitions[].name"].type == "string"
    assert keys["slurm.return_to_service"].type == "0 \\| 1 \\| 2"


def test_alerts_have_runbooks_and_metrics_have_help():
    from pathlib import Path

    runbooks = Path(__file__).resolve().parents[3] / "docs" / "runbooks"
    text = pages.alerts_page()
    names = re.findall(r"^## (\w+)$", text, re.M)
    assert len(names) > 20
    assert [n for n in names if not (runbooks / f"{n}.md").exists()] == []
    metrics = pages.metrics_page()
    assert "`slurmadm_gpu_utilization_percent`" in metrics
    assert "| `slurmadm_" in metrics and "|  |" not in metrics.split("| --- |", 1)[1]


def test_drain_reasons_cover_every_draining_health_check():
    from slurmadm.health.checks import CHECKS

    text = pages.drain_reasons_page()
    for c in CHECKS:
        if c.on_fail == "drain":
            assert f"| `{c.id}` |" in text


def test_group_help_reads_consistently():
    """Every group's one-line summary in `slurmadm --help` is a whole sentence that fits."""
    commands = doccli.walk()
    for g, cs in doccli.groups(commands).items():
        short = cs[0].short
        assert short.endswith(".") and not short.endswith("..."), (g, short)
        assert len(short) <= 70, (g, short)
        assert cs[0].help.startswith(short), g


@pytest.mark.skipif(not shutil.which("groff"), reason="groff is not installed")
def test_man_pages_render_without_warnings():
    man = doccli.man_pages(date="2026-01-01")
    assert "slurmadm.1" in man and "slurmadm-health.1" in man
    assert set(GROUPS) <= {n[len("slurmadm-"):-2] for n in man if n != "slurmadm.1"}
    for name, text in man.items():
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=text, capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0 and not p.stderr.strip(), (name, p.stderr[:2000])
    out = subprocess.run(["groff", "-man", "-Tutf8"], input=man["slurmadm-health.1"], capture_output=True,
                         text=True, timeout=60).stdout
    assert "slurmadm health run" in re.sub(r".\x08", "", out)


def test_head_installs_man_pages_and_completion_once(tmp_path):
    from slurmadm.deploy import head

    done = head.install_docs(str(tmp_path))
    assert f"{head.MAN_DIR}/slurmadm-health.1" in done
    assert head.BASH_COMPLETION in done and head.ZSH_COMPLETION in done
    bash = (tmp_path / head.BASH_COMPLETION.lstrip("/")).read_text()
    assert "_SLURMADM_COMPLETE" in bash and "complete " in bash
    assert (tmp_path / head.ZSH_COMPLETION.lstrip("/")).read_text().startswith("#compdef slurmadm")
    assert head.docs_changes(str(tmp_path)) == []
    assert head.install_docs(str(tmp_path)) == []  # a second run changes nothing
    old = tmp_path / head.MAN_DIR.lstrip("/") / "slurmadm-gone.1"
    old.write_text(".TH GONE 1\n")
    assert head.install_docs(str(tmp_path), dry_run=True) == [f"{head.MAN_DIR}/slurmadm-gone.1 (removed)"]
    assert old.exists()
    head.install_docs(str(tmp_path))
    assert not old.exists()



def _families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines()
            if line.startswith("# TYPE ") and line.split()[2].startswith("slurmadm_")}


def test_metrics_reference_names_what_the_exporters_serve(head_text, node_exporter):  # noqa: F811
    page = pages.metrics_page()
    served = _families(head_text) | _families(node_exporter())
    assert len(served) > 40
    missing = sorted(n for n in served if f"`{n}`" not in page and f"`{n}_total`" not in page)
    assert not missing, f"served but not in the metrics reference: {missing}"
