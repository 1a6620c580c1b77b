"""Known defects of the tools burn-in runs, per GPU model and release (data/known_tool_issues.toml,
each with its public source): a `dcgmi diag` that hangs on B200 is not started, a test that fails
healthy GPUs of one release only warns. What the tool says of the node is otherwise unchanged.

Pure: the node job (stress.dcgm_diag) gives the model, the release it read and the run level."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

EFFECTS = ("hang", "false-fail")
TOOLS = ("dcgmi-diag",)
ID_RE = re.compile(r"^[a-z0-9][a-z0-9\-]{0,63}$")


@dataclass(frozen=True)
class KnownIssue:
    id: str
    tool: str
    models: tuple[str, ...]
    versions: tuple[str, ...]
    levels: tuple[int, ...]
    effect: str
    tests: tuple[str, ...]
    why: str
    source: str

    def label(self) -> str:
        """How a result names it: the id and where it is reported."""
        return f"{self.id}: {self.why} ({self.source.split(' ', 1)[0]})"


@cache
def issues() -> tuple[KnownIssue, ...]:
    with resources.files(__package__).joinpath("data/known_tool_issues.toml").open("rb") as fh:
        raw = tomllib.load(fh)
    out = []
    for i, e in enumerate(raw.get("issue", [])):
        where = f"known_tool_issues.toml issue {i + 1}"
        if not ID_RE.match(str(e.get("id", ""))) or e.get("tool") not in TOOLS or e.get("effect") not in EFFECTS:
            raise ValueError(f"{where}: needs an id, a tool of {TOOLS} and an effect of {EFFECTS}")
        if not str(e.get("source", "")).startswith("https://") or not e.get("why"):
            raise ValueError(f"{where}: every entry names why and its public source")
        if e["effect"] == "false-fail" and not e.get("tests"):
            raise ValueError(f"{where}: a false-fail names the tests it excuses")
        out.append(KnownIssue(e["id"], e["tool"], tuple(e["models"]), tuple(str(v) for v in e["versions"]),
                              tuple(int(lv) for lv in e["levels"]), e["effect"], tuple(e.get("tests", ())),
                              e["why"], e["source"]))
    return tuple(out)


def ids() -> list[str]:
    return [i.id for i in issues()]


def unknown(names) -> list[str]:
    """The names among a site's `burnin.ignore_known_issues` that are no known issue."""
    known = set(ids())
    return [n for n in names if n not in known]


def dcgmi_version(text: str) -> str | None:
    """The DCGM release from `dcgmi -v`: the host engine's (it runs the diagnostic) where the
    output has a "Hostengine build info:" section (DCGM 4.7), else its one "Version : 3.3.5"
    (DCGM 3); or from `dcgmi --version` ("dcgmi  version: 4.7.0", the client's). None: none."""
    text = text or ""
    engine = re.search(r"(?is)hostengine build info:.*?^\s*version\s*:\s*(\d+(?:\.\d+)+)", text, re.M)
    if engine:
        return engine.group(1)
    m = re.search(r"(?im)^\s*(?:dcgmi\s+)?version\s*:\s*(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def _model_matches(wanted: tuple[str, ...], model: str) -> bool:
    # "B200" matches the gres Type "b200" and "NVIDIA B200", never "GB200"
    return any(re.search(rf"(?i)(?<![A-Za-z0-9]){re.escape(w)}(?![A-Za-z0-9])", model) for w in wanted)


def _version_matches(versions: tuple[str, ...], version: str | None) -> bool:
    if "*" in versions:
        return True
    if not version:
        return False  # an unknown release is not assumed to be a known-bad one
    return any(version == v or version.startswith(v + ".") for v in versions)


def matching(tool: str, model: str, version: str | None, level: int, ignore=()) -> list[KnownIssue]:
    """The known issues of `tool` at this run level for this GPU model and release, less those
    the site ignores."""
    ignored = set(ignore)
    return [i for i in issues() if i.tool == tool and i.id not in ignored and level in i.levels
            and _model_matches(i.models, model) and _version_matches(i.versions, version)]


def excused(failures: list[str], found: list[KnownIssue]) -> tuple[list[str], list[KnownIssue]]:
    """Of the failing DCGM results ("<test name> GPU<n>: ..."), those a false-fail entry excuses,
    and the entries that excused them."""
    out, used = [], []
    for issue in (i for i in found if i.effect == "false-fail"):
        mine = [f for f in failures if any(f.lower().startswith(t.lower()) for t in issue.tests)]
        if mine:
            out += [f for f in mine if f not in out]
            used.append(issue)
    return out, used


def for_site(site) -> list[dict]:
    """Each known issue with what it does on this site: the profiles whose GPU model it names at
    the site's `burnin.dcgm_level` (any release: which one a node runs is read on the node), and
    whether the site ignores it (`burnin.ignore_known_issues`). For `burnin known-issues`."""
    b = site.burnin
    out = []
    for i in issues():
        profiles = sorted(name for name, p in site.profiles.items() if _model_matches(i.models, p.gpus.model))
        ignored = i.id in set(b.ignore_known_issues)
        acts = bool(profiles) and b.dcgm_level in i.levels and not ignored
        if ignored:
            here = "ignored (site)"
        elif not profiles:
            here = "-"
        elif not b.dcgm_level:
            here = "diag off (dcgm_level 0)"
        elif not acts:
            here = f"not at dcgm_level {b.dcgm_level}"
        else:
            here = ("not run on " if i.effect == "hang" else "warns on ") + ", ".join(profiles)
        out.append({"id": i.id, "tool": i.tool, "models": list(i.models), "versions": list(i.versions),
                    "levels": list(i.levels), "effect": i.effect, "tests": list(i.tests), "why": i.why,
                    "source": i.source, "profiles": profiles, "ignored": ignored, "acts_here": acts, "here": here})
    return out


def rows(items: list[dict]) -> list[tuple[str, ...]]:
    return [(r["id"], "/".join(r["models"]), ",".join(r["versions"]), ",".join(map(str, r["levels"])), r["effect"],
             r["here"]) for r in items]
