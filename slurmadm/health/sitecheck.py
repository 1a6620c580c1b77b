"""Site checks the health package adds to `slurmadm.site.validate.EXTRA_CHECKS`.

Imported by the CLI (every `slurmadm` command) and by the health run before it loads a site, so
the site package itself never imports the health package.
"""

from __future__ import annotations

import difflib

from ..site.validate import EXTRA_CHECKS
from .checks import BY_ID


def check_health(site) -> list[str]:
    problems = []
    for cid in site.health.checks:
        if cid not in BY_ID:
            close = difflib.get_close_matches(cid, list(BY_ID), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(BY_ID)})"
            problems.append(f"health.checks.{cid}: unknown check id{hint}")
    models = {site.profile(g.profile).gpus.model for g in site.nodes if site.has_profile(g.profile)}
    given = site.health.models if "models" in site.health.model_fields_set else {}
    for model in given:
        if model not in models:
            problems.append(f"health.models.{model}: no node profile has GPU model {model!r} "
                            f"(profiles use: {', '.join(sorted(models))})")
    return problems


if check_health not in EXTRA_CHECKS:
    EXTRA_CHECKS.append(check_health)
