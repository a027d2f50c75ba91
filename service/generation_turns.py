"""The turns of a job that generates first: when it may take a step, and with whom.

A job that generates first (CaptureRequest.generate: `service.generation`) takes
one step of its generation per turn, alone, and goes back to the queue like a job
with pieces left, so other clients' work runs between its steps; dropped between
steps like any queued job. Generating jobs waiting for their first step when one
takes its first run as one (`GenerationTurns.ready`, `service.generation.merge`: one
forward a step for all of their prompts, as many as one group of key/value caches
holds), and at most `CACHED_GENERATIONS` such runs hold caches at once. A generating
job about to take its first step joins a run under way first where that run's group
has room for its prompts (`GenerationTurns.joinable`, `SharedGeneration.join`),
before starting one of its own or waiting for a cache slot, unless a job that came
before it waits for a cache slot (`waits_for_slot`: joins would keep the runs holding
the slots going past it). Once its continuations end, its pieces run as any job's.

The batcher (`service.micro_batching`) decides whose turn it is (fair turns, the
queue, the lock, the worker); `GenerationTurns` decides, for a generating job, whether
its turn may be taken now (`may_start`), what its first step does (joins a run under
way, waits out the batch window and merges with the others waiting, or goes alone:
`ready`), runs the step (`step`) and settles the job after it (`stepped`, `drop`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable, Sequence

from service.admission import example_sizes
from service.admitted_call import Job, engine_failure
from service.generation import CACHED_GENERATIONS, SharedGeneration, merge

log = logging.getLogger("jaxattn.service")


class GenerationTurns:
    """The batcher's decisions for its generating jobs (`Job.generation`). Guarded by
    the batcher's lock (`Job.lock`) except `step`, which the worker runs without it.

    Args:
      engine: the batcher's engine (`Engine.continuations` runs the steps).
      stats: the batcher's counters (`MicroBatcher.stats`): `joined_generations`,
        `merged_generations`, `generated_tokens`, `generation_steps`, `abandoned`.

    The batcher's queue (`pending`, the jobs waiting for a turn, by arrival), its fair
    turn order and its settings (`join`, the batch window) are passed to each call, as
    they are when it asks: a test or the server may change a setting on a live batcher.
    """

    def __init__(self, engine, stats: collections.Counter):
        self.engine = engine
        self.stats = stats

    def may_start(self, job: Job, pending: Iterable[Job], *, join: bool) -> bool:
        """(lock held) The generating job may take its next step now: any step after its
        first, or a first step that joins a run under way (`joinable`, where `join`), else
        only while fewer than `CACHED_GENERATIONS` runs (each alone or shared) hold their
        key/value caches (`held`). A run that failed holds none: the turn that fails the
        job is due at once (`SharedGeneration.failed`)."""
        gen = job.generation
        if gen.started or gen.joining is not None:
            return True
        if gen.shared is not None and gen.shared.failed is not None:
            return True
        if len(self.held(pending)) < CACHED_GENERATIONS:
            return True
        # only a job not merged into a run of its own yet may join one under way, and
        # not past an earlier one waiting for a cache slot (`waits_for_slot`)
        return (
            gen.shared is None
            and join
            and self.joinable(job, pending) is not None
            and not any(self.waits_for_slot(j, pending, join) for j in self._before(job, pending))
        )

    @staticmethod
    def _before(job: Job, pending: Iterable[Job]) -> list[Job]:
        """The pending jobs that came before `job` (`pending` is by arrival)."""
        out = []
        for j in pending:
            if j is job:
                return out
            out.append(j)
        return out

    def waits_for_slot(self, job: Job, pending: Iterable[Job], join: bool) -> bool:
        """(lock held, every slot held) A live job whose first step needs a cache slot:
        not joining a run under way (`joinable`), or merged into a run of its own. Later
        jobs do not join the runs holding the slots past it: each join keeps its run,
        and so the slot, going, and a stream of them would hold the slots for ever."""
        gen = job.generation
        if job.dead or gen is None or gen.started or gen.joining is not None:
            return False
        if gen.shared is not None:
            return gen.shared.failed is None
        return not join or self.joinable(job, pending) is None

    def held(self, pending: Iterable[Job]) -> dict:
        """(lock held) The started generations (alone or shared) holding key/value
        caches, by id: those of the pending jobs (the worker runs no step now)."""
        return {
            id(j.generation.shared): j.generation.shared
            for j in pending
            if j.generation and j.generation.started
        }

    def joinable(self, job: Job, pending: Iterable[Job]) -> SharedGeneration | None:
        """(lock held) A started shared generation the job's first step may join
        (`SharedGeneration.joins`), or None."""
        ask = job.generation.ask
        return next((s for s in self.held(pending).values() if s.joins(ask)), None)

    def ready(
        self,
        first: Job,
        pending: Iterable[Job],
        in_turn: Sequence[Job],
        *,
        join: bool,
        window_s: float | None,
    ) -> float | None:
        """(lock held) `first`, a generating job whose turn it is (`may_start`), readied
        for its next step: its first step joins a run under way (`joinable`, where
        `join`), else, with `window_s` (None: no merging), runs as one with the other
        generating jobs waiting for theirs (`merge`) once the window since it came has
        passed, so that companions sent with it join. Returns how long to wait for them
        first (then ask again), or None: its step may run now (`step`).

        Args:
          pending: the jobs waiting for a turn, by arrival (`first` among them).
          in_turn: the same in the batcher's fair turn order: the order they merge in.
        """
        gen = first.generation
        joins = None
        if gen.shared is None and gen.joining is None and join:
            joins = self.joinable(first, pending)
        if joins is not None:  # its first step joins a run under way (counted once it did)
            gen.joining = joins
        elif gen.shared is None and window_s is not None:
            # its first step, with whoever waits for theirs; after the window, as for
            # captures, so that companions sent with it join
            until = first.submitted + window_s
            if time.monotonic() < until and not first.dead:
                return until - time.monotonic()
            self._merge(first, in_turn)
        return None

    def _merge(self, first: Job, in_turn: Sequence[Job]) -> None:
        """(lock held) `first` is about to take its generation's first step: it and the
        other generating jobs waiting for theirs run as one (`service.generation.merge`:
        as many as one group of key/value caches holds), each of their turns a step of it."""
        waiting = [
            j
            for j in in_turn
            if j is not first and j.generation is not None and j.generation.shared is None
        ]
        merged = merge(self.engine, [first.generation] + [j.generation for j in waiting])
        if len(merged) > 1:
            self.stats["merged_generations"] += len(merged) - 1

    def step(self, job: Job) -> tuple[int, list | None]:
        """(lock not held) One step of the job's generation (`GenerationRun.step`): the
        tokens it made and, once its continuations end, each text's prompt +
        continuation (else None). An engine failure fails the job (0, None). A first
        step that joined a run under way counts in `joined_generations`."""
        gen = job.generation
        joining = gen.joining
        try:
            return gen.step(self.engine)
        except Exception as e:
            log.error("engine failed generating: %s", type(e).__name__, exc_info=e)
            with job.lock:
                job.fail(engine_failure(e))
            return 0, None
        finally:
            if joining is not None and gen.shared is joining:
                with job.lock:
                    self.stats["joined_generations"] += 1

    def stepped(self, job: Job, made: int, sequences: list | None) -> bool:
        """(lock held) After the job's step: once its continuations ended, its examples
        become prompt + continuation, sized as they are; a job that died meanwhile lets
        go of its caches (`drop`). Returns whether it lives on (its next turn is due)."""
        self.stats["generated_tokens"] += made
        self.stats["generation_steps"] += 1
        if sequences is not None:
            job.sizes = tuple(example_sizes(self.engine, job.spec, sequences))
            job.tokenized = sequences
            job.generation = None
        job.running = False
        if job.dead:
            self.drop(job)  # its caches freed now, not with the call
            if job.error is None:  # its client left during the step (not a failure)
                self.stats["abandoned"] += 1
            return False
        return True

    @staticmethod
    def drop(job: Job) -> None:
        """(lock held) A job that left (dropped from the queue, or died during its
        step): its generation's key/value caches are freed now (its prompts alone are
        ended in a shared run), and it generates no more."""
        if job.generation is not None:
            job.generation.leave()
        job.generation = None
