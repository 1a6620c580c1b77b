"""Errors that the CLI turns into one line on stderr and an exit code (see DESIGN.md).

Exit codes: 0 all good; 1 worked and found problems; 2 bad usage or bad site file;
3 an outside system was unreachable (or timed out).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


class SlurmadmError(Exception):
    """Base class: carries the exit code the CLI should use. The message is one line."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # one line, always
        return " ".join(self.message.split("\n"))


class UsageError(SlurmadmError):
    """Bad argument or bad input file; nothing was changed."""

    exit_code = EXIT_USAGE


class SiteError(UsageError):
    """The site file is invalid. `problems` holds one line per problem (path: message)."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: {problems[0]}" if problems else f"{source}: invalid")

    def lines(self) -> list[str]:
        return [f"{self.source}: {p}" for p in self.problems]


class UnreachableError(SlurmadmError):
    """An outside system (Slurm, NVML, BMC, ssh) could not be reached or timed out."""

    exit_code = EXIT_UNREACHABLE


class CommandFailed(SlurmadmError):
    """An outside command ran and refused (non-zero exit); message names the command."""

    exit_code = EXIT_UNREACHABLE

    def __init__(self, argv: list[str], returncode: int, output: str):
        self.argv = argv
        self.returncode = returncode
        self.output = output.strip()
        last = self.output.splitlines()[-1] if self.output else "no output"
        super().__init__(f"{argv[0]} failed (exit {returncode}): {last}")


class LockBusy(SlurmadmError):
    """Another slurmadm run holds the lock for this operation."""

    exit_code = EXIT_PROBLEMS
