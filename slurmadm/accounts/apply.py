"""Carrying out a plan: one lock, a backup, batched sacctmgr calls, an audit event per change, and
a re-read that must show nothing left to do.

Batching. slurmdbd commits each sacctmgr call separately and a commit costs ~0.3-0.6 s whatever
it holds (50 adds in one call 0.65 s, one add 0.5 s), so entities that get the same change go in
one call (`modify account where name=a,b,c set GrpTRES=gres/gpu=8`), and every new account and
user association goes into one `sacctmgr load` file: one commit for 500 accounts and 2,000 users.

The load file only ever adds. A load that both modifies existing associations and changes a
user's default account silently drops the association changes while printing them as done (seen
on 22.05.8 and 24.11.5; tests/integration/test_accounts.py shows it), so every change
to something that exists goes through `sacctmgr modify`, and a new user's default account is
only set by the load line that creates the user.

Order matters where Slurm refuses otherwise: default accounts move before the old association
goes ("can not remove the default account of a user"), QOS leave the projects' lists before the
QOS is deleted ("Associations ... have these as their Default QOS").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EXIT_PROBLEMS, CommandFailed, SlurmadmError, UnreachableError
from ..files import exclusive_lock
from ..site import Site
from ..slurm.accounting import AccountingState, JobReader, Sacctmgr, parse_assoc_mgr, read_assoc_mgr
from ..store import Store
from .desired import Desired, desired_state
from .plan import KINDS, Op, Plan, make_plan, mark_blocked

CHUNK = 500  # names per sacctmgr call (argv stays far below its limit)


class NotConverged(SlurmadmError):
    """The apply ran, but slurmdbd still differs from the site afterwards."""

    exit_code = EXIT_PROBLEMS


class Refused(SlurmadmError):
    """slurmdbd refused some changes (named); the others were made (exit 1, not 3: it answered)."""

    exit_code = EXIT_PROBLEMS


@dataclass
class Batch:
    """One sacctmgr call and the plan operations it carries out."""

    argv: list[str]  # sacctmgr arguments after `-i`; for a load, ["load", "file=..."]
    ops: list[Op]
    load_text: str = ""  # the load file's content (written next to the backup)
    stage: int = 0  # calls of one stage touch disjoint entities and run at once


@dataclass
class ApplyResult:
    plan: Plan
    done: list[Op] = field(default_factory=list)
    skipped: list[Op] = field(default_factory=list)  # deletions without --prune, blocked ones
    backups: list[str] = field(default_factory=list)
    refused: list[tuple[Op, str]] = field(default_factory=list)  # (operation, sacctmgr's reason)
    calls: int = 0
    seconds: float = 0.0
    not_enforced: list[str] = field(default_factory=list)  # applied, not yet in slurmctld's assoc_mgr
    enforced_after_s: float | None = None  # how long slurmctld took to hold everything applied

    def to_json(self) -> dict:
        return {
            "cluster": self.plan.cluster,
            "applied": [op.to_json() for op in self.done],
            "skipped": [op.to_json() for op in self.skipped],
            "backups": self.backups,
            "sacctmgr_calls": self.calls,
            "seconds": round(self.seconds, 3),
            "enforced": not self.not_enforced,
            "not_yet_in_slurmctld": self.not_enforced,
            "enforced_after_s": None if self.enforced_after_s is None else round(self.enforced_after_s, 3),
        }


# ------------------------------------------------------------------------ slurmctld enforcement

ENFORCE_WAIT_S = 30.0  # how long apply waits for slurmctld to hold what slurmdbd has


def expected_in_slurmctld(ops: list[Op]) -> tuple[set[tuple[str, str]], set[str]]:
    """The associations ((account, user); user "" for an account's own) and QOS an apply added:
    what slurmctld must hold before a job may use them."""
    assocs = {(op.name, "") for op in ops if op.kind == "add-account"}
    assocs |= {(op.account, op.name) for op in ops if op.kind == "add-user"}
    return assocs, {op.name for op in ops if op.kind == "add-qos"}


def wait_enforced(ops: list[Op], cluster: str, read: Callable[[], str], *, deadline_s: float = ENFORCE_WAIT_S,
                  poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> tuple[list[str], float]:
    """slurmdbd hands new associations to slurmctld asynchronously (a job submitted in between is
    refused "Invalid account or account/partition combination"): poll `scontrol show assoc_mgr`
    until it holds everything `ops` added, at most `deadline_s`. -> (what is still missing, named
    `user:u@a` / `account:a` / `qos:q`; the seconds it took)."""
    want_assocs, want_qos = expected_in_slurmctld(ops)
    started = clock()
    if not want_assocs and not want_qos:
        return [], 0.0
    while True:
        try:
            have_assocs, have_qos = parse_assoc_mgr(read(), cluster)
        except UnreachableError:
            have_assocs, have_qos = set(), set()
        missing = sorted(f"user:{u}@{a}" if u else f"account:{a}" for a, u in want_assocs - have_assocs)
        missing += sorted(f"qos:{q}" for q in want_qos - have_qos)
        if not missing or clock() - started >= deadline_s:
            return missing, clock() - started
        sleep(poll_s)


# ------------------------------------------------------------------------------------ locking


def lock_path(site: Site) -> Path:
    return Path(site.store.path).parent / f"accounts-apply-{site.cluster.name}.lock"


def apply_lock(path: Path) -> AbstractContextManager[None]:
    """One apply at a time per cluster."""
    return exclusive_lock(path, lambda holder: f"another `accounts apply` is running (lock {path} held by {holder})")


# ------------------------------------------------------------------------------------ backups


def backup_dir(site: Site) -> Path:
    if site.accounting.backup_dir:
        return Path(site.accounting.backup_dir)
    return Path(site.store.path).parent / "accounts-backups"


def backup_paths(cluster: str, directory: Path) -> tuple[Path, Path]:
    """Where this apply's `sacctmgr dump` and QOS table go (a new pair per apply)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    return directory / f"{cluster}-{stamp}.cfg", directory / f"{cluster}-{stamp}-qos.txt"


def save_dump(sacctmgr: Sacctmgr, path: Path) -> None:
    """`sacctmgr dump`: accounts, users and their limits (not QOS)."""
    sacctmgr.dump(str(path))
    if not path.exists():
        raise UnreachableError(f"sacctmgr dump wrote no {path}")


def rotate(directory: Path, cluster: str, keep: int) -> None:
    for pattern in (f"{cluster}-*[0-9].cfg", f"{cluster}-*-qos.txt", f"{cluster}-*-load.cfg"):
        old = sorted(directory.glob(pattern))
        for path in old[: max(0, len(old) - keep)]:
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ batches


def _chunks(names: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(names), CHUNK):
        yield names[i : i + CHUNK]


def _grouped(ops: list[Op], key: Callable[[Op], tuple]) -> list[tuple[tuple, list[Op]]]:
    groups: dict[tuple, list[Op]] = {}
    for op in ops:
        groups.setdefault(key(op), []).append(op)
    return list(groups.items())


def _args(op: Op, *, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(c.arg for c in op.changes if c.field not in skip and c.arg)


def _named(prefix: list[str], ops: list[Op], where: list[str], tail: list[str]) -> list[Batch]:
    """`<prefix> name=a,b,c <where> <tail>` calls, at most CHUNK names each; an op's name may
    repeat (one user, several associations) and is named once."""
    names = list(dict.fromkeys(op.name for op in ops))
    out = []
    for chunk in _chunks(names):
        chosen = set(chunk)
        out.append(Batch([*prefix, f"name={','.join(chunk)}", *where, *tail], [op for op in ops if op.name in chosen]))
    return out


def _user_calls(verb: str, ops: list[Op], have: AccountingState, cluster: str, tail: list[str]) -> list[Batch]:
    """`<verb> user where name=U account=A`: sacctmgr takes every existing association in U x A,
    so one call serves all of `ops` when that is exactly their associations (200 members of 50
    projects getting the same cap: one call, not 50); otherwise one call per account."""
    if not ops:
        return []
    users = sorted({op.name for op in ops})
    accounts = sorted({op.account for op in ops})
    if len(accounts) > 1 and len(users) <= CHUNK and len(accounts) <= CHUNK:
        uset, aset = set(users), set(accounts)
        matched = {(a, u) for (a, u) in have.assocs if u in uset and a in aset}
        if matched == {(op.account, op.name) for op in ops}:
            return [Batch([verb, "user", "where", f"name={','.join(users)}", f"account={','.join(accounts)}",
                           cluster, *tail], list(ops))]
    return [b for (account,), group in _grouped(ops, lambda o: (o.account,))
            for b in _named([verb, "user", "where"], group, [f"account={account}", cluster], tail)]


def _load_opts(changes) -> str:
    """`:Key='value'` options of a load line from the changes' sacctmgr arguments."""
    out = ""
    for c in changes:
        if c.field in ("Parent", "DefaultAccount") or not c.arg:
            continue
        key, _, value = c.arg.partition("=")
        out += f":{key}='{value}'"
    return out


def load_text(cluster: str, ops: list[Op]) -> str:
    """A `sacctmgr load` file that adds the new accounts (parents first) and user associations.
    It names only new things, so load has nothing to modify."""
    lines = [f"Cluster - '{cluster}'"]
    children: dict[str, list[Op]] = {}
    for op in sorted((o for o in ops if o.kind == "add-account"), key=lambda o: (o.depth, o.name)):
        children.setdefault(op.account, []).append(op)
    for parent, accounts in children.items():  # parents were added (or existed) before
        lines.append(f"Parent - '{parent}'")
        lines += [f"Account - '{op.name}'{_load_opts(op.changes)}" for op in accounts]
    defaults = {op.name: c.new for op in ops if op.kind == "add-user" for c in op.changes
                if c.field == "DefaultAccount"}
    current = None
    for op in sorted((o for o in ops if o.kind == "add-user"), key=lambda o: (o.account, o.name)):
        if op.account != current:
            lines.append(f"Parent - '{op.account}'")
            current = op.account
        default = f":DefaultAccount='{defaults[op.name]}'" if op.new_user and op.name in defaults else ""
        lines.append(f"User - '{op.name}'{_load_opts(op.changes)}{default}")
    return "\n".join(lines) + "\n"


def batches(plan_ops: list[Op], cluster: str, have: AccountingState) -> list[Batch]:
    """The sacctmgr calls for runnable operations, in plan order. Calls with the same `stage`
    touch disjoint entities and may run at once (a commit costs latency more than work: four
    QOS adds take 1.4 s one after another, 0.36 s at once); moves and deletions, which reshape
    the tree, run one at a time."""
    c = f"cluster={cluster}"
    by_kind: dict[str, list[Op]] = {}
    for op in plan_ops:
        by_kind.setdefault(op.kind, []).append(op)
    out: list[Batch] = []

    def emit(calls: list[Batch], *, together: bool) -> None:
        stage = out[-1].stage + 1 if out else 0
        for i, batch in enumerate(calls):
            batch.stage = stage if together else stage + i
            out.append(batch)

    # QOS: add (without Preempt: its targets may be added in the same stage), then Preempt and
    # every other change, grouped by identical settings.
    adds = by_kind.get("add-qos", [])
    emit([b for args, ops in _grouped(adds, lambda o: _args(o, skip=("Preempt",)))
          for b in _named(["add", "qos"], ops, [], list(args))], together=True)
    preempts = [op for op in adds if any(ch.field == "Preempt" for ch in op.changes)]
    changes = [  # Preempt of new QOS: carried out for the add-qos operations, no second event
        Batch(b.argv, []) for args, ops in _grouped(
            preempts, lambda o: tuple(c.arg for c in o.changes if c.field == "Preempt"))
        for b in _named(["modify", "qos", "where"], ops, [], ["set", *args])]
    changes += [b for args, ops in _grouped(by_kind.get("modify-qos", []), _args)
                for b in _named(["modify", "qos", "where"], ops, [], ["set", *args])]
    # New accounts and user associations: one load, at the same time as the QOS changes (it
    # only needs the QOS to exist).
    new = by_kind.get("add-account", []) + by_kind.get("add-user", [])
    if new:
        changes.append(Batch(["load"], new, load_text(cluster, new)))
    emit(changes, together=True)

    emit([b for (_depth, parent), ops in sorted(_grouped(by_kind.get("move-account", []), lambda o: (o.depth, o.account)))
          for b in _named(["modify", "account", "where"], ops, [c], ["set", f"Parent={parent}"])], together=False)
    emit([b for args, ops in _grouped(by_kind.get("modify-account", []), _args)
          for b in _named(["modify", "account", "where"], ops, [c], ["set", *args])], together=True)
    emit([b for args, ops in _grouped(by_kind.get("modify-user", []), _args)
          for b in _user_calls("modify", ops, have, c, ["set", *args])], together=True)
    emit([b for (account,), ops in _grouped(by_kind.get("default-account", []), lambda o: (o.account,))
          for b in _named(["modify", "user", "where"], ops, [c], ["set", f"DefaultAccount={account}"])], together=True)

    # Coordinators: `remove|add coordinator account=A,B names=U,V` takes A x B, so accounts that
    # lose (or gain) the same users share a call. One call at a time, removals first: slurmdbd
    # keeps a user's coordinator rows below each account it was added to, and a move from a
    # project to its organisation must drop the old row before adding the new one.
    emit([Batch([verb, "coordinator", f"account={','.join(a.name for a in chunk)}", f"names={users}"], chunk)
          for verb, kind in (("remove", "remove-coordinators"), ("add", "add-coordinators"))
          for (users,), ops in _grouped(by_kind.get(kind, []), lambda o: (o.changes[0].arg,))
          for chunk in (ops[i:i + CHUNK] for i in range(0, len(ops), CHUNK))], together=False)

    # Deletions. Slurm refuses to remove a user's default association while the user keeps
    # others, also when one call mixes such users with others. Default accounts have moved
    # already, so: users losing every association in one call (the user goes with them), then
    # accounts deepest first (their remaining user associations go with them), then the rest.
    deletes = by_kind.get("delete-user", [])
    gone = {op.name for op in by_kind.get("delete-account", [])}
    kept: dict[str, set[str]] = {}
    for account, user in have.assocs:
        if user:
            kept.setdefault(user, set()).add(account)
    for rec in have.partition_assocs:
        kept.setdefault(rec.user, set()).add(f"{rec.account}:{rec.partition}")
    for op in by_kind.get("add-user", []):  # added earlier in this run
        kept.setdefault(op.name, set()).add(op.account)
    for op in deletes:
        kept.get(op.name, set()).discard(op.account)
    leaving = [op for op in deletes if not kept.get(op.name)]
    # A user leaving several projects: slurmdbd refuses `delete user where name=U` while U has
    # other associations than the default ("You can not remove the default account of a user"),
    # so those go first, then every leaving user's last (default) association in one call.
    last: dict[str, Op] = {}
    for op in leaving:
        if op.name not in last or op.account == have.default_account.get(op.name):
            last[op.name] = op
    first = [op for op in leaving if last[op.name] is not op]
    emit(_user_calls("delete", first, have, c, []), together=False)
    emit(_named(["delete", "user", "where"], [op for op in leaving if last[op.name] is op], [c], []), together=False)
    with_account: dict[str, list[Op]] = {}
    for op in deletes:
        if op.account in gone and kept.get(op.name):
            with_account.setdefault(op.account, []).append(op)
    for (_depth,), ops in sorted(_grouped(by_kind.get("delete-account", []), lambda o: (o.depth,)), reverse=True):
        calls = _named(["delete", "account", "where"], ops, [c], [])
        for b in calls:
            b.ops += [u for op in b.ops for u in with_account.get(op.name, [])]
        emit(calls, together=False)
    rest = [op for op in deletes if kept.get(op.name) and op.account not in gone]
    emit(_user_calls("delete", rest, have, c, []), together=False)
    emit(_named(["delete", "qos", "where"], by_kind.get("delete-qos", []), [], []), together=False)
    return out


# --------------------------------------------------------------------------------------- apply

PARALLEL = 8  # sacctmgr calls at once within a stage


def _stages(calls: list[Batch]) -> list[list[Batch]]:
    out: list[list[Batch]] = []
    for batch in calls:
        if out and out[-1][0].stage == batch.stage:
            out[-1].append(batch)
        else:
            out.append([batch])
    return out


def _singles(batch: Batch) -> list[Batch]:
    """A refused multi-name deletion as one call per name (and per account for user
    associations), each carrying its own operations, so one refusal does not stop the rest."""
    keys = list(dict.fromkeys((op.name, op.account if op.kind == "delete-user" else "")
                              for op in batch.ops if op.kind != "delete-user" or batch.argv[1] == "user"))
    out = []
    for name, account in keys:
        argv = [f"name={name}" if a.startswith("name=") else
                f"account={account}" if a.startswith("account=") and account else a for a in batch.argv]
        ops = [op for op in batch.ops if op.name == name and (not account or op.account == account)]
        if batch.argv[1] == "account":  # user associations that go with the account
            ops += [op for op in batch.ops if op.kind == "delete-user" and op.account == name]
        out.append(Batch(argv, ops, stage=batch.stage))
    return out


def _run_stage(sacctmgr: Sacctmgr, stage: list[Batch]) -> tuple[list[Batch], list[tuple[Batch, Exception]]]:
    """Run one stage's calls (at once when there are several); every call finishes before the
    next stage starts. Returns the calls slurmdbd took and the refused ones with their errors.
    A refused deletion of several names is retried one name at a time."""

    def one(batch: Batch) -> None:
        if batch.argv[0] == "load":
            sacctmgr.load(batch.argv[1].removeprefix("file="))
        else:
            sacctmgr.execute(batch.argv)

    done: list[Batch] = []
    failed: list[tuple[Batch, Exception]] = []
    if len(stage) == 1:
        try:
            one(stage[0])
            done.append(stage[0])
        except SlurmadmError as exc:
            failed.append((stage[0], exc))
    else:
        with ThreadPoolExecutor(max_workers=min(PARALLEL, len(stage))) as pool:
            futures = [(batch, pool.submit(one, batch)) for batch in stage]
            for batch, future in futures:
                try:
                    future.result()
                    done.append(batch)
                except SlurmadmError as exc:
                    failed.append((batch, exc))
    retried: list[tuple[Batch, Exception]] = []
    for batch, exc in failed:
        singles = _singles(batch) if batch.argv[0] == "delete" and isinstance(exc, CommandFailed) else []
        if len(singles) < 2:
            retried.append((batch, exc))
            continue
        for single in singles:
            try:
                one(single)
                done.append(single)
            except SlurmadmError as exc2:
                retried.append((single, exc2))
    return done, retried



def _audit(store: Store, ops: list[Op], reason: str, cluster: str, argv: list[str], status: str) -> list[int]:
    command = "sacctmgr -i " + " ".join(argv)
    return store.audit_many([
        (f"accounts.{op.kind}", op.target, reason,
         {"cluster": cluster, "changes": [c.__dict__ for c in op.changes], "command": command[:2000],
          "status": status})
        for op in ops])


def _mark(store: Store, ids: list[int], **detail) -> None:
    if ids:
        store.update_events(ids, **detail)


def plan_for(site: Site, sacctmgr: Sacctmgr, *, jobs: JobReader | None = None) -> tuple[Desired, AccountingState, Plan]:
    """Read slurmdbd and plan. With `jobs`, deletions that would touch jobs are marked blocked."""
    want = desired_state(site)
    have = sacctmgr.read_state()
    if ("root", "") not in have.assocs:
        raise UnreachableError(
            f"slurmdbd has no cluster {want.cluster!r} (site cluster.name): add it with "
            f"`sacctmgr add cluster {want.cluster}` or start its slurmctld once"
        )
    plan = make_plan(want, have)
    if jobs is not None and any(op.is_delete for op in plan.ops):
        plan = mark_blocked(plan, have, jobs.active_jobs())
    return want, have, plan


def apply_site(
    site: Site,
    sacctmgr: Sacctmgr,
    store: Store,
    *,
    prune: bool,
    reason: str,
    jobs: JobReader | None = None,
    progress: Callable[[str], None] | None = None,
    assoc_mgr: Callable[[], str] | None = None,
    enforce_wait_s: float = ENFORCE_WAIT_S,
) -> ApplyResult:
    """Make slurmdbd match the site, then wait (at most `enforce_wait_s`) until slurmctld holds
    what was added (`result.not_enforced` names what it does not yet). Idempotent; safe to
    re-run after an interruption."""
    started = time.monotonic()
    say = progress or (lambda _msg: None)
    with apply_lock(lock_path(site)):
        _want, have, plan = plan_for(site, sacctmgr, jobs=jobs if prune else None)
        todo = plan.runnable(prune)
        chosen = {id(op) for op in todo}
        result = ApplyResult(plan=plan, skipped=[op for op in plan.ops if id(op) not in chosen])
        if not todo:
            result.seconds = time.monotonic() - started
            return result
        # Backup: the QOS table as just read; the dump (no QOS in it) runs while QOS are added and
        # must be written before anything touches an association.
        directory = backup_dir(site)
        dump, qos = backup_paths(plan.cluster, directory)
        qos.write_text(have.qos_table)
        result.backups = [str(dump), str(qos)]
        say(f"backup: {dump}")
        load_path = dump.with_name(dump.stem + "-load.cfg")
        with ThreadPoolExecutor(max_workers=1) as background:
            dumping = background.submit(save_dump, sacctmgr, dump)
            for stage in _stages(batches(todo, plan.cluster, have)):
                if dumping is not None and any(b.argv[1:2] != ["qos"] for b in stage):
                    dumping.result()
                    dumping = None
                for batch in stage:
                    if batch.load_text:
                        load_path.write_text(batch.load_text)
                        batch.argv = ["load", f"file={load_path}"]
                # the intent first: a change slurmdbd commits just before this process is killed
                # still has its audit event ("status": "started"), marked "done" once it returned
                intents = {id(op): event_id for batch in stage for op, event_id in zip(
                    batch.ops, _audit(store, batch.ops, reason, plan.cluster, batch.argv, "started"))}
                done, failed = _run_stage(sacctmgr, stage)
                for batch in done:
                    result.calls += 1
                    command = "sacctmgr -i " + " ".join(batch.argv)
                    _mark(store, [intents[id(op)] for op in batch.ops if id(op) in intents], status="done",
                          command=command[:2000])
                    result.done += batch.ops
                    kinds = sorted({op.kind for op in batch.ops}, key=KINDS.index) or ["add-qos (Preempt)"]
                    say(f"{len(batch.ops):>5} {'+'.join(kinds)}: {command[:110]}")
                for batch, exc in failed:
                    _mark(store, [intents[id(op)] for op in batch.ops if id(op) in intents], status="refused",
                          error=str(exc)[:500])
                    result.refused += [(op, str(exc)) for op in batch.ops]
                if failed and not all(op.is_delete for batch, _ in failed for op in batch.ops):
                    raise failed[0][1]  # later stages build on this one: stop here
            if dumping is not None:
                dumping.result()
        rotate(directory, plan.cluster, site.accounting.backup_keep)
        result.seconds = time.monotonic() - started
        if result.refused:  # deletions slurmdbd would not make; everything else was made
            why = result.refused[0][1]
            raise Refused(f"slurmdbd refused {len(result.refused)} change(s): "
                          + "; ".join(f"{op.kind} {op.target}" for op, _ in result.refused[:10])
                          + (" ..." if len(result.refused) > 10 else "") + f" (first: {why})")
        # Re-read: what should have happened must now be absent from a fresh plan.
        _w, _h, after = plan_for(site, sacctmgr, jobs=jobs if prune else None)
        left = after.runnable(prune)
        result.seconds = time.monotonic() - started
        if left:
            raise NotConverged(
                f"slurmdbd still differs after apply: {len(left)} change(s) left, first: "
                f"{left[0].kind} {left[0].target} {left[0].describe()}".strip()
            )
        read = assoc_mgr or (lambda: read_assoc_mgr(env=sacctmgr.env))
        result.not_enforced, result.enforced_after_s = wait_enforced(result.done, plan.cluster, read,
                                                                     deadline_s=enforce_wait_s)
        if result.not_enforced:
            result.enforced_after_s = None
        result.seconds = time.monotonic() - started
        return result
