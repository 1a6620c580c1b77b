"""`python -m slurmadm.health prolog|epilog|periodic`: the hook entry point Slurm runs."""

from .deferred import defer

defer("inspect")  # see deferred.py: a fifth of a healthy prolog's imports, used by none of it

from .hook import main  # noqa: E402

main(exit_now=True)
