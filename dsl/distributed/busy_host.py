"""Ranks on one host's CPUs that cannot be faster than one process: say so at the start.

Ranks of one host split its cores between them and add an exchange per step, so with a core
each they train at one process's speed at best, on the same cores; and the ranks of a
synchronous job wait for each other at every exchange, so other work holding the cores slows
every rank to the pace of the one the scheduler left waiting (docs/benchmarks.md, "Ranks on
one host's CPUs"). A new user who tried two ranks on a small machine saw epochs many times
longer than one process's and nothing in the run's output said why. The chief says it once,
from facts the host gives at once: its core count and its 1-minute load average (in which the
ranks' own start-up counts at most one per rank, so only the load beyond that is other work's).
Standard library only.
"""

from __future__ import annotations

import os
import sys

SECTION = 'docs/distributed.md, "Ranks on one host\'s CPUs"'


def busy_host_warnings(local_ranks: int, load: float | None = None, cores: int | None = None) -> list[str]:
    """The warnings for `local_ranks` ranks on this host's CPUs (`load`, `cores`: the host's 1-minute
    load average and core count, read here when not given); none for a single process."""
    if local_ranks < 2:
        return []
    cores = cores or os.cpu_count() or 1
    warnings = []
    if cores // local_ranks <= 1:
        warnings.append(f"warning: {local_ranks} ranks on this host's {cores} CPU cores have {_share(cores, local_ranks)}: "
                        f"ranks of one host share the cores one process would use and add an exchange per step, so "
                        f"expect one process's speed at best (ranks pay off across hosts, or with a GPU each; {SECTION})")
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this system
            return warnings
    if load - local_ranks >= cores / 2:
        warnings.append(f"warning: this host's load average is {load:.1f} on {cores} cores: other work holds the cores, "
                        f"and every step waits for the slowest of the {local_ranks} ranks, so steps are slower than "
                        f"one process's and uneven ({SECTION})")
    return warnings


def _share(cores: int, ranks: int) -> str:
    return "fewer cores than ranks" if cores < ranks else "one core each"


def say_busy_host(local_ranks: int) -> None:
    """Print the warnings as `dslrun: warning:` lines on stderr (the chief calls this)."""
    for warning in busy_host_warnings(local_ranks):
        print(f"dslrun: {warning}", file=sys.stderr, flush=True)
