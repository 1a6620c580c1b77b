"""The dev cluster's fake nodes as SSH sees them: one OpenSSH `sshd` per node on 127.0.0.1, each in
its own mount and UTS namespace (`unshare`), so every node has its own software stack at the real
paths a fact collector reads on a real node:

  /etc/os-release                 the node's OS image (ID, VERSION_ID, IMAGE_ID)
  /proc/sys/kernel/osrelease      its kernel (what `uname -r` would say on a real node)
  /proc/cmdline                   its kernel command line
  /proc/driver/nvidia/version     the loaded NVIDIA kernel module (real NVRM line format)
  /usr/local/bin                  nvidia-smi (`-q` header), ofed_info, nv-fabricmanager, mpirun, enroot,
                                  and `dev-software`, the node's "package manager" (rollout steps)
  /usr/local/lib                  libnccl.so.X.Y.Z, libcudnn.so.X.Y.Z
  /opt                            its own, empty at first (`slurmadm deploy` installs there); the
                                  host's when this Python lives under /opt

The node's slurmd runs inside the same namespaces (nsenter), so its prolog and HealthCheckProgram
see the node's files too. State per node under <state>/nodes/<node>/: `software.json` holds what is
installed and what is running; driver, CUDA, kernel, VBIOS and OS image take effect only at the
next (Slurm) reboot, as on a real node; libraries and tools at once.

The node's RebootProgram (<state>/bin/reboot, run by its slurmd) calls `reboot` below: stop the
node's slurmd and sshd, boot the staged stack, start sshd (a fresh namespace) and slurmd with `-b`
(slurmd reports "node rebooted"), so Slurm's REBOOT_REQUESTED/REBOOT_ISSUED cycle completes for real.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

from ..errors import UsageError
from ..files import write_atomic
from ..proc import run

# Facts a fake node has, and those that change only when the node boots.
FACTS = ("os_image", "kernel", "driver", "cuda", "nccl", "cudnn", "ofed", "mpi", "enroot",
         "nvidia-fabricmanager", "vbios", "cmdline_extra")
BOOT_FACTS = frozenset({"os_image", "kernel", "driver", "cuda", "vbios", "cmdline_extra"})
_VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:~\-]{0,63}$")
_CMDLINE_RE = re.compile(r"^[A-Za-z0-9._=,:/\- ]{0,200}$")
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# What the namespace mounts over (the host keeps its own files; only the node's processes see these).
MOUNTS = (
    ("os-release", "/etc/os-release"),
    ("osrelease", "/proc/sys/kernel/osrelease"),
    ("cmdline", "/proc/cmdline"),
    ("proc-driver", "/proc/driver"),
    ("bin", "/usr/local/bin"),
    ("lib", "/usr/local/lib"),
    ("opt", "/opt"),  # its own /opt, empty at first (what `slurmadm deploy` installs into)
)


def _python_under(path: str) -> bool:
    """Whether this Python lives under `path` (then a node must keep the host's, or nothing runs)."""
    where = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)]
    return any(os.path.realpath(p) == path or os.path.realpath(p).startswith(path + "/") for p in where)


def ssh_port(port_base: int, index: int) -> int:
    """Node i's sshd: base+500+i (clear of the BMC emulators at base+300..399 and the burn-in
    rendezvous ports at base+400..499)."""
    return port_base + 500 + index


MAX_SSH_NODES = 100


def defaults(software) -> dict[str, str]:
    """A fresh node runs the site's baseline (`[software]`)."""
    extra = dict(software.extra)
    return {
        "os_image": software.os_image,
        "kernel": software.kernel,
        "driver": software.driver_version,
        "cuda": software.cuda_version,
        "nccl": software.nccl_version,
        "cudnn": extra.get("cudnn", "9.8.0.87"),
        "ofed": software.ofed_version,
        "mpi": extra.get("mpi", "4.1.7"),
        "enroot": extra.get("enroot", "3.5.0"),
        "nvidia-fabricmanager": extra.get("nvidia-fabricmanager", software.driver_version),
        "vbios": extra.get("vbios", "97.00.B9.00.0F"),
        "cmdline_extra": "",
    }


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`driver=575.51.03 nccl=2.26.2` -> dict, every key a known fact and every value plain."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"{pair!r}: expected FACT=VALUE (facts: {', '.join(FACTS)})")
        if key not in FACTS:
            raise UsageError(f"{key!r}: not a fake-node fact (known: {', '.join(FACTS)})")
        pattern = _CMDLINE_RE if key == "cmdline_extra" else _VALUE_RE
        if not pattern.match(value):
            raise UsageError(f"{key}={value!r}: not a plain version string")
        out[key] = value
    return out


class FakeNode:
    def __init__(self, state_dir: Path, node: str):
        if not _NODE_RE.match(node):
            raise UsageError(f"node name {node!r} is not a plain host name")
        self.state_dir = Path(state_dir)
        self.node = node
        self.dir = self.state_dir / "nodes" / node

    # ------------------------------------------------------------------ state
    @property
    def software_path(self) -> Path:
        return self.dir / "software.json"

    def software(self) -> dict[str, dict[str, str]]:
        try:
            return json.loads(self.software_path.read_text())
        except FileNotFoundError:
            raise UsageError(f"{self.node}: no fake-node state in {self.dir} (run `dev-cluster up --ssh`)") from None

    def create(self, software_defaults: dict[str, str]) -> None:
        """First boot: the baseline, installed and running. An existing node keeps its stack."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.software_path.exists():
            state = {"installed": dict(software_defaults), "running": dict(software_defaults)}
            write_atomic(self.software_path, json.dumps(state, indent=1, sort_keys=True) + "\n")
        self.render()

    def set(self, values: dict[str, str], *, at_boot: bool) -> dict[str, dict[str, str]]:
        """Install `values`; boot facts run now unless `at_boot` (then at the next reboot)."""
        state = self.software()
        state["installed"].update(values)
        for key, value in values.items():
            if key not in BOOT_FACTS or not at_boot:
                state["running"][key] = value
        write_atomic(self.software_path, json.dumps(state, indent=1, sort_keys=True) + "\n")
        self.render()
        return state

    def boot(self) -> None:
        """What a reboot does to the stack: everything installed now runs."""
        state = self.software()
        state["running"] = dict(state["installed"])
        write_atomic(self.software_path, json.dumps(state, indent=1, sort_keys=True) + "\n")
        self.render()

    # ------------------------------------------------------------------ files the node shows
    def render(self) -> None:
        run_ = self.software()["running"]
        inst = self.software()["installed"]
        d = self.dir
        for sub in ("proc-driver/nvidia", "bin", "lib", "ssh", "opt"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        image = run_["os_image"]
        m = re.match(r"^([a-z]+)-([0-9][0-9.]*)", image)
        os_id, os_ver = (m.group(1), m.group(2)) if m else ("linux", "0")
        # Bind-mounted files are rewritten in place (same inode), so a running namespace sees them.
        _write_in_place(d / "os-release", (
            f'PRETTY_NAME="{os_id.capitalize()} {os_ver} ({image})"\nNAME="{os_id.capitalize()}"\n'
            f'VERSION_ID="{os_ver}"\nID={os_id}\nIMAGE_ID={image}\n'))
        _write_in_place(d / "osrelease", run_["kernel"] + "\n")
        extra = (" " + run_["cmdline_extra"]) if run_.get("cmdline_extra") else ""
        _write_in_place(d / "cmdline", f"BOOT_IMAGE=/boot/vmlinuz-{run_['kernel']} root=/dev/md0 ro quiet "
                                       f"iommu=pt{extra}\n")
        # The open kernel module's line (github.com/nix-community/nixGL issue #186 shows the format).
        _write_in_place(d / "proc-driver" / "nvidia" / "version", (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {run_['driver']}  Release Build  "
            f"(dvs-builder@U22-I3-AM02-24-3)  Tue Apr  8 19:01:46 UTC 2025\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"))
        # libraries: installed == what a new process loads
        for lib in d.joinpath("lib").glob("lib*.so.*"):
            lib.unlink()
        for name, key in (("libnccl.so", "nccl"), ("libcudnn.so", "cudnn")):
            (d / "lib" / f"{name}.{inst[key]}").write_text("")
        gpu_lines = "".join(
            f"GPU 00000000:{0x18 + i * 0x1C:02X}:00.0\n    Product Name                          : NVIDIA B200\n"
            f"    VBIOS Version                         : {run_['vbios']}\n" for i in range(8))
        tools = {
            # `nvidia-smi -q` header lines in the format of public logs (e.g. MatthiasSchinzel/sysmon #12)
            # ... and a GPU reset / persistence mode change goes to the stand-in GPUs (fakesmi.py)
            "nvidia-smi": _smi_script(self.state_dir / "gpus", self.node, _script(
                "==============NVSMI LOG==============\n\n"
                "Timestamp                                 : Mon Dec  1 00:00:00 2026\n"
                f"Driver Version                            : {run_['driver']}\n"
                f"CUDA Version                              : {run_['cuda']}\n\n"
                "Attached GPUs                             : 8\n" + gpu_lines)),
            "ofed_info": _script(f"MLNX_OFED_LINUX-{inst['ofed']}:"),
            "nv-fabricmanager": _script(f"Fabric Manager version is : {inst['nvidia-fabricmanager']}"),
            "mpirun": _script(f"mpirun (Open MPI) {inst['mpi']}\n\nReport bugs to https://www.open-mpi.org/community/help/"),
            "enroot": _script(inst["enroot"]),
            # slurmadm on the node (the rollout's health command), with the dev cluster's environment
            "slurmadm": (
                f"#!/bin/sh\n. {shlex.quote(str(self.state_dir / 'env'))}\n"
                f"exec {shlex.quote(sys.executable)} -m slurmadm \"$@\"\n"),
            "dev-software": (
                "#!/bin/sh\n# the fake node's package manager: dev-software install FACT=VERSION ...\n"
                f"exec {shlex.quote(sys.executable)} -m slurmadm.devcluster.fakenode "
                f"--state-dir {shlex.quote(str(self.state_dir))} --node {shlex.quote(self.node)} \"$@\"\n"),
        }
        for name, text in tools.items():
            path = d / "bin" / name
            write_atomic(path, text, mode=0o755)

    # ------------------------------------------------------------------ sshd
    @property
    def host_key(self) -> Path:
        return self.dir / "ssh" / "ssh_host_ed25519_key"

    def ensure_host_key(self, *, regenerate: bool = False) -> str:
        """The node's host key (made once); returns the public key line."""
        (self.dir / "ssh").mkdir(parents=True, exist_ok=True)
        if regenerate:
            self.host_key.unlink(missing_ok=True)
            self.host_key.with_suffix(".pub").unlink(missing_ok=True)
        if not self.host_key.exists():
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.node}-host", "-f", str(self.host_key)],
                timeout=30)
        return Path(str(self.host_key) + ".pub").read_text().strip()

    def sshd_config(self, port: int, authorized_keys: Path) -> Path:
        path = self.dir / "ssh" / "sshd_config"
        write_atomic(path, "\n".join([
            f"# sshd of fake node {self.node}; written by slurmadm dev-cluster",
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key}",
            "PidFile none",
            f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "MaxStartups 512",
            "MaxSessions 64",
            "PrintMotd no",
            "PrintLastLog no",
            # SFTP as a stock sshd offers it (`slurmadm deploy` copies files over it), in-process
            "Subsystem sftp internal-sftp",
            "LogLevel ERROR",
            "",
        ]))
        return path

    def boot_script(self, config: Path) -> list[str]:
        """argv for Daemon.start: new mount+UTS namespaces, the node's files bound over the real
        paths, its hostname, then sshd in the foreground."""
        lines = ["set -e", "mkdir -p /run/sshd"]
        for src, dst in MOUNTS:
            if dst == "/opt" and (not os.path.isdir("/opt") or _python_under("/opt")):
                continue
            lines.append(f"mount --bind {shlex.quote(str(self.dir / src))} {dst}")
        # root's ~/.bashrc is the node's own (a stock one), not the head node's: bash sources it
        # for every command sshd runs, and a head node's (pyenv init, ...) costs 0.5 s a command
        bashrc = self.dir / "bashrc"
        if not bashrc.exists():  # never replaced: a running namespace has this very file bound
            write_atomic(bashrc, "# ~/.bashrc of the fake node's root (a stock compute-node image's)\n", mode=0o644)
        lines.append(f"if [ -f /root/.bashrc ]; then mount --bind {shlex.quote(str(bashrc))} /root/.bashrc; fi")
        lines += [f"hostname {shlex.quote(self.node)}",
                  f"exec /usr/sbin/sshd -D -e -f {shlex.quote(str(config))}"]
        return ["unshare", "--mount", "--uts", "--propagation", "private", "/bin/sh", "-c", "\n".join(lines)]


def _script(text: str) -> str:
    """A fake tool that prints `text`: printf is the shell's own, so it costs one process, as the
    real binary does (a `cat` here-document cost two, and expanded any `$` in a site's versions)."""
    lines = text.rstrip("\n").split("\n")
    return "#!/bin/sh\nprintf '%s\\n' " + " ".join(shlex.quote(line) for line in lines) + "\n"


def _smi_script(gpu_dir: Path, node: str, query: str) -> str:
    """`nvidia-smi`: the printf script for queries; `-r`/`--gpu-reset`/`-pm`/`--persistence-mode`
    exec the stand-in (slurmadm.devcluster.fakesmi) on the node's GPU state."""
    body = query.split("\n", 1)[1]
    return ("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in -r|--gpu-reset|-pm|--persistence-mode|--persistence-mode=*)\n"
            f"  exec {shlex.quote(sys.executable)} -m slurmadm.devcluster.fakesmi --state-dir {shlex.quote(str(gpu_dir))} "
            f"--node {shlex.quote(node)} \"$@\";;\nesac; done\n" + body)


def _write_in_place(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_client_key(ssh_dir: Path) -> Path:
    """The dev cluster's admin key (root-only) and the authorized_keys every fake node reads."""
    ssh_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    key = ssh_dir / "id_ed25519"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "slurmadm-dev-cluster", "-f", str(key)], timeout=30)
    pub = Path(str(key) + ".pub").read_text().strip()
    write_atomic(ssh_dir / "authorized_keys", pub + "\n", mode=0o600)
    return key


def known_hosts_line(port: int, host_pub: str) -> str:
    kind, blob = host_pub.split()[:2]
    return f"[127.0.0.1]:{port} {kind} {blob}"


# ---------------------------------------------------------------------- entry point (on the node)


def main(argv: list[str] | None = None) -> int:
    """`dev-software install FACT=V ...` (inside a fake node; boot facts wait for the reboot),
    `reboot` (the RebootProgram's worker)."""
    ap = argparse.ArgumentParser(prog="dev-software")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--node", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    inst = sub.add_parser("install")
    inst.add_argument("pairs", nargs="+")
    sub.add_parser("show")
    sub.add_parser("reboot")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "install":
            from .cluster import DevCluster

            dc = DevCluster(Path(args.state_dir))
            values = parse_assignments(args.pairs)
            state = dc.set_software(args.node, values, at_boot=True)
            with open(FakeNode(Path(args.state_dir), args.node).dir / "installs.log", "a") as log:
                log.write(json.dumps({"ts": time.time(), "values": values}) + "\n")
            pending = sorted(k for k, v in state["installed"].items() if state["running"].get(k) != v)
            print(f"installed on {args.node}" + (f"; after reboot: {', '.join(pending)}" if pending else ""))
        elif args.cmd == "show":
            print(json.dumps(FakeNode(Path(args.state_dir), args.node).software(), indent=1, sort_keys=True))
        else:
            from .cluster import DevCluster

            # bin/reboot starts this ignoring SIGHUP/SIGTERM (26.05's slurmd signals its power
            # action's processes as the worker stops it); a Python handler instead of SIG_IGN keeps
            # the protection without the slurmd and sshd started below inheriting it (exec resets
            # handled signals to their defaults, not ignored ones)
            import signal

            for sig in (signal.SIGHUP, signal.SIGTERM):
                signal.signal(sig, lambda *_: None)
            time.sleep(1.0)  # let slurmd answer the reboot RPC before it goes away
            DevCluster(Path(args.state_dir)).reboot_node(args.node)
    except UsageError as exc:
        print(f"dev-software: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
