"""A request's generation (CaptureRequest.generate): run by the batcher's worker one step
per turn, then captured like any request.

A generation of N tokens is a prefill of its prompts into the key/value cache and up
to N steps of one token each (`Engine.continuations`, `jaxattn.engine.kv_cache`). The
batcher's single worker owns the engine, so it runs one step of a generating job per
turn and puts the job back in the queue behind the other clients' work
(`MicroBatcher`: fair turns; `service.generation_turns`: when it may), so a long
generation delays another client's request by about one step, never by the whole
continuation. Generating requests that wait
for their first step together run as one (`merge`, `SharedGeneration`): each step
is one forward of all their prompts, each with its own N and EOS rule, and each of
their turns is a step of the shared run. A generating request about to take its
first step while a shared run is under way joins it where it can (`SharedGeneration.
join`: continuous batching): its prompts take the free rows of the group generating
now (padding rows, rows whose continuation ended; the batch grown to the smallest
size of its cache length's ladder holding them where too few are free), prefilled
between two steps without touching the other rows, so it neither waits for that run
to end nor holds caches of its own. It cannot join where a prompt's prompt + N - 1
positions exceed the group's cache length, the group's largest batch has too few free
rows, or prompts of the run wait for a later group (joining would delay them), unless
the run is between its groups with one left to start that holds its prompts too (they
start with it: `Continuations.add`): then it runs as before (its own run, merged with
whoever waits). A job whose client left or
whose deadline passed is dropped between steps, its prompts alone ended in a shared
run. Once every text has ended, the job's
examples become prompt + continuation (`Generation.sequence`: the generated ids,
never re-tokenised) and its pieces run as any capture's, each example's header
naming its `generated_start` and `stop`.

Admission counts every text at its longest (`Engine.plan_generation`: prompt + N, at
most the model's positions): the request's token and output limits and its buffer
reservation are its worst case, checked before anything runs (`service.requests`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxattn.errors import DeviceMemoryError, UsageError

# Most tokens one request may generate unless the server is told otherwise
# (`ServerOptions.max_new_tokens`, `jaxattn serve --max-new-tokens`).
DEFAULT_MAX_NEW_TOKENS = 256
# Most generations holding their key/value caches on the device at once: each holds at
# most a group's (`KVDecoder.largest_batch`, within the engine's output budget) between
# its turns; a further generating request waits its turn until one of them has ended,
# so the device holds at most this many caches however many clients generate.
CACHED_GENERATIONS = 2


@dataclasses.dataclass(frozen=True)
class GenerationAsk:
    """What a request asks to generate: its prompts (TokenizedTexts, in input order),
    up to `new` tokens each, ending at EOS unless `stop_at_eos` is False."""

    prompts: tuple
    new: int
    stop_at_eos: bool = True


def joins_by_default(engine) -> bool:
    """Whether a server on `engine` lets generating calls join a shared generation under
    way when not told (`ServerOptions.join_generations`): on an accelerator, where a
    step of one token costs about the same for one row as for a few (it reads the
    weights and caches either way), not on the CPU, where it grows with the rows: there
    two small runs side by side do as well as or better than one run that late calls
    slow down (staggered clients, 2-core CPU: joining 0.92-0.99x the time without on a
    quiet machine, 0.68x under load; BENCHMARKS.md)."""
    devices = getattr(engine, "devices", None)  # an engine double has none
    return bool(devices) and devices[0].platform != "cpu"


def generator_problem(engine) -> str | None:
    """Why `engine` cannot generate (an encoder, a decoder without its next-token head),
    in words, or None where it can."""
    check = getattr(engine, "check_generator", None)
    if check is None:  # an engine double
        return "this server's engine does not generate"
    try:
        check()
    except UsageError as e:
        return str(e)
    return None


class SharedGeneration:
    """Several requests' generations run as one (`merge`): one engine `Continuations` over
    all their prompts, each with its own N and EOS rule, so a step is one token of every
    unfinished prompt of every request, in one forward of their group."""

    def __init__(self, asks: Sequence[GenerationAsk]):
        self.asks = tuple(asks)
        self.spans, at = [], 0
        for ask in self.asks:
            self.spans.append(range(at, at + len(ask.prompts)))
            at += len(ask.prompts)
        self._run = None  # the engine's Continuations, from the first step
        self._left: list[range] = []  # spans `end`ed
        # the exception a step raised: the run is broken (a group that failed to start
        # lost its prompts; a failed step may have left its caches donated), so every
        # request in it fails with it at its next turn, none steps it again
        self.failed: BaseException | None = None
        # (span, error): a request whose prompt the device cannot hold even alone
        # (DeviceMemoryError naming its index): it alone fails, the others go on
        self._lost: list[tuple[range, BaseException]] = []

    @property
    def started(self) -> bool:
        """Its first step has run: it may hold key/value caches on the device until it
        ends (`CACHED_GENERATIONS`)."""
        return self._run is not None

    def step(self, engine) -> int:
        """One step of the run (a token of each unfinished prompt); returns how many
        tokens it generated (0 once every continuation has ended). Raises what a step
        raised, at that step and at every one after it (`failed`), except a prompt the
        device cannot hold even alone: its request's prompts end, the step goes on
        with the others, and that request's error waits for its turn (`lost`)."""
        if self.failed is not None:
            raise self.failed
        try:
            if self._run is None:
                prompts = [p for a in self.asks for p in a.prompts]
                news = [a.new for a in self.asks for _ in a.prompts]
                flags = [a.stop_at_eos for a in self.asks for _ in a.prompts]
                self._run = engine.continuations(prompts, news, stop_at_eos=flags)
                for span in self._left:  # requests that left before it started
                    self._run.end(span)
            while True:
                try:
                    return self._run.step()
                except DeviceMemoryError as e:
                    index = getattr(e, "index", None)
                    span = next((s for s in self.spans if index in s), None)
                    if span is None:
                        raise
                    self._lost.append((span, e))
                    self._run.end(span)
        except Exception as e:
            self.failed = e
            raise

    def lost(self, span: range) -> BaseException | None:
        """The error of the request of `span` where the device could not hold one of its
        prompts (`step`), else None."""
        return next((e for s, e in self._lost if s == span), None)

    def joins(self, ask: GenerationAsk) -> bool:
        """Whether `ask`'s prompts would join the run's group generating now (`join`)."""
        return (
            self.failed is None and self._run is not None and self._run.joins(ask.prompts, ask.new)
        )

    def join(self, ask: GenerationAsk) -> range | None:
        """`ask`'s prompts join the run between its steps, into its group generating now
        (`Continuations.add`: rows free, or the batch grown within the engine's budgets;
        their need within its caches): their span, or None (nothing changed) where they
        do not all fit it or the run has not started."""
        if self._run is None or self.failed is not None:
            return None
        indices = self._run.add(ask.prompts, ask.new, ask.stop_at_eos, join_only=True)
        if indices is None:
            return None
        span = range(len(self._run.prompts) - len(indices), len(self._run.prompts))
        self.asks += (ask,)
        self.spans.append(span)
        return span

    def over(self, span: range) -> bool:
        return self._run is not None and self._run.over(span)

    def sequences(self, span: range) -> list:
        """The prompts' of `span`: prompt + continuation each (`Generation.sequence`)."""
        return [g.sequence for g in self._run.results(span)]

    def end(self, span: range) -> None:
        """No more tokens for the prompts of `span` (their request left); before the
        first step, they are ended as the run starts: never generated."""
        self._left.append(span)
        if self._run is not None:
            self._run.end(span)


def merge(engine, runs: Sequence[GenerationRun]) -> list[GenerationRun]:
    """Runs that have not started, in turn order, the first about to take its first
    step: that one and as many after it as fit one group of the engine's key/value
    caches with it (`KVDecoder.groups`), now one `SharedGeneration`; returns them."""
    first, *rest = runs
    taken = [first]
    decoder = getattr(engine, "kv_decoder", None)  # an engine double generates alone
    if decoder is not None:
        needs = [decoder.need(p.length, first.ask.new) for p in first.ask.prompts]
        for run in rest:
            more = needs + [decoder.need(p.length, run.ask.new) for p in run.ask.prompts]
            if len(decoder.groups(dict(enumerate(more)))) == 1:
                taken.append(run)
                needs = more
    shared = SharedGeneration([r.ask for r in taken])
    for run, span in zip(taken, shared.spans, strict=True):
        run.shared, run.span = shared, span
    return taken


class GenerationRun:
    """A job's generation inside the worker: `step` once per turn until it returns the
    examples to capture. Alone, or sharing one `SharedGeneration` with other jobs
    (`merge`): each of their turns is a step of the shared run."""

    def __init__(self, ask: GenerationAsk):
        self.ask = ask
        self.shared: SharedGeneration | None = None  # from `merge` (or its first step)
        self.span = range(len(ask.prompts))
        # a started run its first step joins (`SharedGeneration.join`), as the batcher
        # decided it (`service.generation_turns`)
        self.joining: SharedGeneration | None = None

    @property
    def started(self) -> bool:
        """Its (shared) run has taken a step: it may hold key/value caches on the device
        until it ends (`CACHED_GENERATIONS`)."""
        return self.shared is not None and self.shared.started

    def step(self, engine) -> tuple[int, list | None]:
        """(tokens generated by this step, then, once every continuation of its prompts
        has ended, each text's prompt + continuation to capture (`Generation.sequence`);
        else None). A first step that was to join a run (`joining`) and could not (the
        device out of memory for it: `Continuations.add`) takes no step: (0, None), its
        next turn decides anew (a run of its own only within `CACHED_GENERATIONS`)."""
        if self.shared is None and self.joining is not None:
            joining, self.joining = self.joining, None
            span = joining.join(self.ask)
            if span is None:
                return 0, None
            self.shared, self.span = joining, span
        if self.shared is None:
            merge(engine, [self])
        if (lost := self.shared.lost(self.span)) is not None:
            raise lost  # the device could not hold one of its prompts (an earlier step)
        made = self.shared.step(engine)
        if self.shared.lost(self.span) is not None:
            return made, None  # on this step: it fails at its next turn (`lost`)
        if not self.shared.over(self.span):
            return made, None
        return made, self.shared.sequences(self.span)

    def leave(self) -> None:
        """Its request left: no more tokens for its prompts in a shared run."""
        if self.shared is not None:
            self.shared.end(self.span)
