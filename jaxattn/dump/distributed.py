"""Many hosts: a thin layer over JAX's multi-controller runtime.

Each process of a dump job is started with the same command; JAX's
`jax.distributed.initialize` tells it its index and the process count (from
flags, from the environment, or by JAX's own detection of TPU pods, SLURM,
Open MPI and Kubernetes). Nothing else is shared: every process reads its own
shards of the input and writes its own shards of the store, computing on its
local devices only, so no collective ever crosses processes.
"""

from __future__ import annotations

import dataclasses
import os

from jaxattn.errors import JaxattnError, UsageError

MODES = ("auto", "on", "off")


@dataclasses.dataclass(frozen=True)
class Process:
    """This process's place in the job."""

    index: int = 0
    count: int = 1
    distributed: bool = False

    @property
    def label(self) -> str:
        """``p1/4`` in a multi-process job, "" otherwise."""
        return f"p{self.index}/{self.count}" if self.count > 1 else ""


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"${name} must be an integer, got {value!r}") from None


def cluster_detected() -> bool:
    """Whether JAX's cluster auto-detection recognises this environment.

    The same test `jax.distributed.initialize()` makes without arguments; it
    lives in a private module, so any change there reads as "not detected".
    """
    try:
        from jax._src import clusters

        return any(
            not env.opt_in_only_method and env.is_env_present()
            for env in clusters.ClusterEnv._cluster_types
        )
    except Exception:  # noqa: BLE001 - a private API: be conservative
        return False


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    mode: str = "auto",
) -> Process:
    """Join the job's processes with `jax.distributed.initialize` when there are several.

    Call it before anything touches a jax backend (before `jaxattn.load`).

    Args:
      coordinator: HOST:PORT of process 0's coordinator ($JAX_COORDINATOR_ADDRESS).
      num_processes: processes in the job ($JAX_NUM_PROCESSES).
      process_id: this process, 0-based ($JAX_PROCESS_ID).
      mode: "auto" initialises when any of the above is given or JAX detects a
        cluster; "on" always (JAX fills in what is missing); "off" never.

    Returns:
      This process's index and the process count.

    Raises:
      UsageError: a bad mode or environment value, or flags that describe
        no job (none of them, one missing, a process id out of range) where no
        cluster fills them in.
      JaxattnError: JAX could not join the job (its reason, with the flags).
    """
    if mode not in MODES:
        raise UsageError(f"unknown distributed mode {mode!r}: valid modes are {', '.join(MODES)}")
    coordinator = coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS") or None
    num_processes = num_processes if num_processes is not None else _env_int("JAX_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("JAX_PROCESS_ID")
    explicit = any(v is not None for v in (coordinator, num_processes, process_id))
    detected = cluster_detected()
    if mode == "off" or (mode == "auto" and not explicit and not detected):
        return Process()
    if not detected:  # JAX cannot fill in what is missing: say which flag it is
        _check_job(coordinator, num_processes, process_id)
    import jax

    try:
        jax.distributed.initialize(
            coordinator_address=coordinator, num_processes=num_processes, process_id=process_id
        )
    except (ValueError, RuntimeError) as e:
        raise JaxattnError(
            f"cannot join the job (--coordinator {coordinator}, "
            f"--num-processes {num_processes}, --process-id {process_id}): "
            f"{e}"
        ) from e
    return Process(jax.process_index(), jax.process_count(), True)


def _check_job(coordinator, num_processes, process_id) -> None:
    """UsageError unless the three flags describe a job (no cluster to fill them in)."""
    given = {
        "--coordinator": coordinator,
        "--num-processes": num_processes,
        "--process-id": process_id,
    }
    missing = [flag for flag, v in given.items() if v is None]
    if missing:
        raise UsageError(
            f"a job of several processes needs {', '.join(missing)} (or their "
            "$JAX_* variables) here: no cluster JAX knows was detected"
        )
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--coordinator {coordinator!r}: expected HOST:PORT of process 0")
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise UsageError(
            f"--process-id {process_id} is not one of the job's --num-processes "
            f"{num_processes} (0..{num_processes - 1})"
        )


def shutdown(process: Process) -> None:
    """Leave the job: JAX waits here until every process has arrived (a barrier)."""
    if process.distributed:
        import jax

        jax.distributed.shutdown()
