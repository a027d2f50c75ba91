"""The CPUs this process may use, for every pool of threads that is sized by them.

A container is often given a share of a large machine as a CPU quota (Kubernetes'
`limits.cpu: 2` on a 64-core node: cgroup v2's `cpu.max` "200000 100000", v1's
`cpu.cfs_quota_us` / `cpu.cfs_period_us`), not as an affinity mask: the process
sees all 64 cores, and a pool sized by them runs 64 threads on 2 CPUs' time,
throttled. `usable` is the least of the affinity mask and the quotas of the
process's cgroup and of every cgroup above it (rounded up, at least 1).

The process's cgroups are read from `/proc/self/cgroup` and `/sys/fs/cgroup`
(`cgroup_levels`, which the memory limit's reading in `jaxattn.engine.host` shares).
The standard library only: the contract side's pools (`jaxattn.capture.bulk`,
`jaxattn.wire.codec_pool`) and the engine's use it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_line(proc_cgroup: str, controller: str) -> tuple[str, str] | None:
    """(the controllers of its hierarchy, the process's cgroup there) for `controller`
    ("memory", "cpu": v1's; "": v2's, whose line names no controller) from
    /proc/self/cgroup ("id:controllers:path"), None where no line names it or the file
    cannot be read. A line not of that form is passed over."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3 and controller in parts[1].split(","):
                    return parts[1], parts[2]
    except (OSError, UnicodeDecodeError):
        return None
    return None


def levels(root: str, path: str) -> list[str]:
    """The directories of cgroup `path` under a hierarchy's `root`, from the process's
    own up to the root. Inside a container the process's cgroup (as the host names it)
    is often the root of the hierarchy mounted there: levels that do not exist are the
    caller's to pass over."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    return [os.path.join(root, *parts[:depth]) for depth in range(len(parts), -1, -1)]


def read(path: str) -> str:
    """A cgroup file's text."""
    with open(path, encoding="ascii") as f:
        return f.read()


def _v2_quota(level: str) -> float | None:
    """CPUs of cgroup v2's `cpu.max` ("QUOTA PERIOD" in microseconds; "max": none)."""
    quota, period = read(os.path.join(level, "cpu.max")).split()
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(level: str) -> float | None:
    """CPUs of cgroup v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none)."""
    quota = int(read(os.path.join(level, "cpu.cfs_quota_us")))
    if quota < 0:
        return None
    return quota / int(read(os.path.join(level, "cpu.cfs_period_us")))


# Each cgroup version: (its CPU controller's hierarchies under CGROUP_ROOT, the
# controller its line of /proc/self/cgroup names: none for v2's "0::/path", the
# reading of one level's quota). v1 mounts the controller as "cpu,cpuacct" (with
# "cpu" a link to it on most systems) or "cpu" alone.
_VERSIONS = (
    (("",), "", _v2_quota),
    (("cpu", "cpu,cpuacct"), "cpu", _v1_quota),
)


def cgroup_levels(
    controller: str,
    subs: tuple[str, ...],
    proc_cgroup: str | None = None,
    cgroup_root: str | None = None,
) -> Iterator[str]:
    """The directories of the process's cgroup in `controller`'s hierarchy ("": v2's),
    from its own up to the hierarchy's root (`levels`), under each of `subs` (where the
    hierarchy is mounted under `cgroup_root`: v2's "", v1's "cpu", "memory", ...) and,
    for v1, under the name its /proc/self/cgroup line gives it ("cpuacct,cpu"); none
    where no line names the controller. The files are read from `PROC_CGROUP` and under
    `CGROUP_ROOT` where not given (looked up at the call: tests point them elsewhere)."""
    proc_cgroup = PROC_CGROUP if proc_cgroup is None else proc_cgroup
    cgroup_root = CGROUP_ROOT if cgroup_root is None else cgroup_root
    found = cgroup_line(proc_cgroup, controller)
    if found is None:
        return
    mounted, path = found
    for sub in dict.fromkeys(subs + ((mounted,) if controller else ())):
        yield from levels(os.path.join(cgroup_root, sub) if sub else cgroup_root, path)


def cgroup_cpus(proc_cgroup: str | None = None, cgroup_root: str | None = None) -> float | None:
    """The CPUs the process's cgroups allow it (a container's CPU limit), None where none
    sets a quota: the least quota over cgroup v2 and v1 and every level from the process's
    cgroup up to the hierarchy's root (`cgroup_levels`). Levels without the files, or
    with files that cannot be read or make no sense (a period of 0), are passed over."""
    least = None
    for subs, controller, quota in _VERSIONS:
        for level in cgroup_levels(controller, subs, proc_cgroup, cgroup_root):
            try:
                cpus = quota(level)
            except (OSError, ValueError, ZeroDivisionError, UnicodeDecodeError):
                continue
            if cpus is not None and cpus > 0 and (least is None or cpus < least):
                least = cpus
    return least


def affinity() -> int:
    """The cores the process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable(proc_cgroup: str | None = None, cgroup_root: str | None = None) -> int:
    """The CPUs this process may use: its affinity mask's cores, or fewer where a cgroup
    quota allows less (`cgroup_cpus`, rounded up: 1.5 CPUs' time keeps two threads
    busy part of the time); at least 1."""
    cores = affinity()
    quota = cgroup_cpus(proc_cgroup, cgroup_root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)
