"""The fake node's `nvidia-smi` for what changes a GPU: `--gpu-reset` / `-r` and `-pm` /
`--persistence-mode`, with `-i` / `--id` (NVML indices, PCI bus ids, UUIDs or serials, comma
separated). Everything else (`nvidia-smi -q`'s header) stays a printf script (fakenode.py), one
process as the real binary is; that script execs this module only for these options.

Output and exit codes are real nvidia-smi's (nvidia-smi(1) "RETURN VALUE", as quoted in
Ricks-Lab/gpu-utils#88: 0 success, 2 invalid argument, 6 a query to find an object was
unsuccessful, 15 the GPU has fallen off the bus, 255 other error). The wording of the reset lines is from public logs:
- success: "GPU 00000000:1A:00.0 was successfully reset." (NVIDIA/NVSentinel#1690, #1692;
  NVIDIA/gpu-operator#118);
- refusal: "The following GPUs could not be reset:" then "  GPU <bus id>: In use by another client"
  and the "... currently being used by one or more other processes ..." paragraph, exit 255
  (NVIDIA/NVSentinel#1690, NVIDIA/mig-parted#181 "exit status 255", ComputeCanada/puppet-magic_castle#387);
  persistence mode counts as a client (NVSentinel#1690: `nvidia-smi -pm 0` first);
- an injected failure (`gpu-fault --kind reset-fail`) is the same block with NVML's error string
  "Unknown Error" as the reason (nvmlErrorString(NVML_ERROR_UNKNOWN));
- a GPU that fell off the bus: "Unable to determine the device handle for GPU <bus id>: GPU is lost.
  Reboot the system to recover this GPU", exit 15.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from . import gpus

IN_USE_NOTE = ("{n} {devices} currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
               "application, graphics application such as an X server, or a monitoring application such as "
               "another instance of nvidia-smi). Please first kill all processes using {these} and all compute "
               "applications running in the system.")
_REASON = {"in-use": "In use by another client", "reset-fail": "Unknown Error"}


class _Exit(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code, self.text = code, text


def _select(state: dict, ids: str | None) -> list[int]:
    """Physical slots for `-i`: an NVML index counts the GPUs present (as NVML enumerates them)."""
    present = [i for i, g in enumerate(gpus.effective_gpus(state)) if g["present"]]
    if ids is None:
        return present
    out: list[int] = []
    for raw in ids.split(","):
        want = raw.strip()
        slot = None
        if want.isdigit():
            if int(want) >= len(present):
                raise _Exit(6, "No devices were found")
            slot = present[int(want)]
        else:
            norm = want.upper()
            for i, g in enumerate(state["gpus"]):
                bus = g["pci_bus_id"].upper()
                if want in (g["uuid"], g["serial"]) or norm in (bus, bus[4:]):
                    slot = i
                    break
            if slot is None:
                raise _Exit(6, "No devices were found")
            if slot not in present:
                bus = state["gpus"][slot]["pci_bus_id"][4:]
                raise _Exit(15, f"Unable to determine the device handle for GPU {bus}: GPU is lost.  "
                                "Reboot the system to recover this GPU")
        if slot not in out:
            out.append(slot)
    return out


def run(state_dir: Path, node: str, argv: list[str]) -> tuple[int, str]:
    ap = argparse.ArgumentParser(prog="nvidia-smi", add_help=False)
    ap.add_argument("-r", "--gpu-reset", action="store_true")
    ap.add_argument("-pm", "--persistence-mode", choices=["0", "1", "DISABLED", "ENABLED"])
    ap.add_argument("-i", "--id")
    args, rest = ap.parse_known_args(argv)
    if rest or args.gpu_reset == bool(args.persistence_mode):
        return 2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
    try:
        state = gpus.read_state(state_dir, node)
        slots = _select(state, args.id)
        if args.persistence_mode:
            on = args.persistence_mode in ("1", "ENABLED")
            gpus.set_persistence(state_dir, node, slots, on)
            lines = [f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {state['gpus'][s]['pci_bus_id']}."
                     for s in slots]
            return 0, "\n".join(lines + ["All done."])
        outcomes = gpus.reset(state_dir, node, slots)
    except _Exit as e:
        return e.code, e.text
    lost = [o for o in outcomes if o.error == "lost"]
    if lost:
        return 15, "\n".join(f"Unable to determine the device handle for GPU {o.pci_bus_id[4:]}: GPU is lost.  "
                             "Reboot the system to recover this GPU" for o in lost)
    lines = [f"GPU {o.pci_bus_id} was successfully reset." for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return 0, "\n".join(lines)
    lines.append("The following GPUs could not be reset:")
    lines += [f"  GPU {o.pci_bus_id}: {_REASON[o.error]}" for o in failed]
    busy = sum(o.error == "in-use" for o in failed)
    if busy:
        lines += ["", IN_USE_NOTE.format(n=busy, devices="device is" if busy == 1 else "devices are",
                                         these="this device" if busy == 1 else "these devices")]
    return 255, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fakesmi", add_help=False)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--node", required=True)
    ours, rest = ap.parse_known_args(argv)
    try:
        code, text = run(Path(ours.state_dir), ours.node, rest)
    except UsageError as e:
        code, text = 255, f"stand-in nvidia-smi: {e}"
    if text:
        print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
