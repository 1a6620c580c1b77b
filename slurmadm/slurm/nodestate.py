"""Slurm node states as Slurm defines them: data, with its source, and one decoder.

Sources (the same in 22.05 through 26.05, names only added over time):
- `slurm/slurm.h`, `enum node_states` and the `NODE_STATE_*` bits: the low four bits are the
  base state, one of UNKNOWN, DOWN, IDLE, ALLOCATED, ERROR, MIXED, FUTURE; every other
  `NODE_STATE_*` is a flag beside it (NET, RES, UNDRAIN, CLOUD, DRAIN, COMPLETING, NO_RESPOND,
  POWERED_DOWN, FAIL, POWERING_UP, MAINT, REBOOT_REQUESTED, REBOOT_CANCEL, POWERING_DOWN,
  DYNAMIC_FUTURE, REBOOT_ISSUED, PLANNED, INVALID_REG, POWER_DOWN, POWER_UP, POWER_DRAIN,
  DYNAMIC_NORM, and BLOCKED from 24.11).
- JSON (data_parser v0.0.40+, `scontrol --json show node`, `sinfo --json`, slurmrestd): `state` is
  a list of those names (`["IDLE", "COMPLETING", "PLANNED"]`, `["MIXED", "DRAIN"]`); the base is
  wherever it is in the list, not at a fixed position (real samples in tests/fixtures/slurm/).
- Text (`src/common/slurm_protocol_defs.c`): `node_state_string_complete` writes the base then
  `+FLAG` for each flag (`IDLE+DRAIN+DYNAMIC_NORM`); older releases and `sinfo %T` use
  `node_state_string`, one word that folds a flag into the base (`DRAINED`, `DRAINING`,
  `COMPLETING`, `PLANNED`, `MAINT`, `REBOOT`, `FAIL`, `FAILING`, `INVAL`, ...) plus one suffix
  character (sinfo.1 NODE STATE CODES): `*` not responding, `~` powered off, `#` powering up,
  `!` pending power down, `%` powering down, `$` maintenance reservation, `@` pending reboot,
  `^` reboot issued, `-` planned by the backfill scheduler. Compounds of both occur
  (`REBOOT*+DRAIN`, `IDLE~+CLOUD`). `sinfo %t` writes the compact forms (`alloc`, `mix`, `drng`,
  `comp`, `plnd`, `futr`, `unk`, `resv`, `pow_dn`, `pow_up`, `failg`).
"""

from __future__ import annotations

from typing import Any

# slurm.h enum node_states (NODE_STATE_END excluded)
BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")

# slurm.h NODE_STATE_* flag -> the name JSON and `+FLAG` text use for it
FLAGS = {
    "NODE_STATE_NET": "PERFCTRS",
    "NODE_STATE_RES": "RESERVED",
    "NODE_STATE_UNDRAIN": "UNDRAIN",
    "NODE_STATE_CLOUD": "CLOUD",
    "NODE_RESUME": "RESUME",
    "NODE_STATE_DRAIN": "DRAIN",
    "NODE_STATE_COMPLETING": "COMPLETING",
    "NODE_STATE_NO_RESPOND": "NOT_RESPONDING",
    "NODE_STATE_POWERED_DOWN": "POWERED_DOWN",
    "NODE_STATE_FAIL": "FAIL",
    "NODE_STATE_POWERING_UP": "POWERING_UP",
    "NODE_STATE_MAINT": "MAINTENANCE",
    "NODE_STATE_REBOOT_REQUESTED": "REBOOT_REQUESTED",
    "NODE_STATE_REBOOT_CANCEL": "REBOOT_CANCELED",
    "NODE_STATE_POWERING_DOWN": "POWERING_DOWN",
    "NODE_STATE_DYNAMIC_FUTURE": "DYNAMIC_FUTURE",
    "NODE_STATE_REBOOT_ISSUED": "REBOOT_ISSUED",
    "NODE_STATE_PLANNED": "PLANNED",
    "NODE_STATE_INVALID_REG": "INVALID_REG",
    "NODE_STATE_POWER_DOWN": "POWER_DOWN",
    "NODE_STATE_POWER_UP": "POWER_UP",
    "NODE_STATE_POWER_DRAIN": "POWER_DRAIN",
    "NODE_STATE_DYNAMIC_NORM": "DYNAMIC_NORM",
    "NODE_STATE_BLOCKED": "BLOCKED",
}
FLAG_NAMES = frozenset(FLAGS.values())

# node_state_string's one-word forms (and sinfo's compact ones): word -> (implied base, flags).
# The implied base applies only when the text names no base of its own.
WORDS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "ALLOC": ("ALLOCATED", ()),
    "MIX": ("MIXED", ()),
    "UNK": ("UNKNOWN", ()),
    "FUTR": ("FUTURE", ()),
    "DRAINED": ("IDLE", ("DRAIN",)),  # drain set, nothing running (IDLE, or DOWN when -o says so)
    "DRAINING": ("ALLOCATED", ("DRAIN",)),  # drain set, jobs still running
    "DRNG": ("ALLOCATED", ("DRAIN",)),
    "DRAIN": (None, ("DRAIN",)),  # the flag, and sinfo %t's compact DRAINED
    "COMP": ("IDLE", ("COMPLETING",)),
    "COMPLETING": (None, ("COMPLETING",)),
    "PLND": ("IDLE", ("PLANNED",)),
    "PLANNED": (None, ("PLANNED",)),
    "MAINT": ("IDLE", ("MAINTENANCE",)),
    "RESV": ("IDLE", ("RESERVED",)),
    "REBOOT": ("IDLE", ("REBOOT_REQUESTED",)),
    "CANCEL_REBOOT": (None, ("REBOOT_CANCELED",)),
    "FAILING": ("ALLOCATED", ("FAIL",)),
    "FAILG": ("ALLOCATED", ("FAIL",)),
    "INVAL": (None, ("INVALID_REG",)),
    "NPC": (None, ("PERFCTRS",)),
    "POW_DN": (None, ("POWER_DOWN",)),
    "POW_UP": (None, ("POWERING_UP",)),
}

# sinfo.1 NODE STATE CODES: suffix -> flag
SUFFIXES = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "!": "POWER_DOWN",
    "%": "POWERING_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}

# older spellings of the same flags
ALIASES = {"REBOOT_CANCEL": "REBOOT_CANCELED", "NO_RESPOND": "NOT_RESPONDING", "MAINT": "MAINTENANCE",
           "RES": "RESERVED", "NET": "PERFCTRS"}


def decode(state: Any, flags: Any = None) -> tuple[str, frozenset[str]]:
    """Any release's node state (a JSON list, a 22.05 lower-case string plus `state_flags`, a
    `+`-compound text with suffixes) -> (base, flags). The base is the first base state named
    anywhere; a flag is never a base; with no base named, the one a folded word implies
    (`DRAINED` -> IDLE), else UNKNOWN."""
    if isinstance(state, (list, tuple)):
        parts = [str(s) for s in state]
    elif isinstance(state, str):
        parts = state.split("+")
    else:
        parts = []
    parts += [str(f) for f in (flags or [])]
    base: str | None = None
    implied: str | None = None
    out: set[str] = set()
    for raw in parts:
        word = raw.strip().upper()
        while word and word[-1] in SUFFIXES:
            out.add(SUFFIXES[word[-1]])
            word = word[:-1]
        if not word:
            continue
        if word in BASE_STATES:
            base = base or word
            continue
        if word in WORDS:
            implies, adds = WORDS[word]
            out.update(adds)
            implied = implied or implies
            continue
        out.add(ALIASES.get(word, word))
    return base or implied or "UNKNOWN", frozenset(out)
