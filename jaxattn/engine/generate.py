"""Greedy generation on a decoder, and captures of the prompt and its continuation.

    gens = engine.generate(["The cat sat"], max_new_tokens=8)   # `Engine.generate`
    caps = engine.capture(["The cat sat"], generate=8)          # prompt + continuation

Each text is continued by the argmax of its last position's logits ``h W_U^T``
(`causal_lm.unembedding`; Gemma 2's soft-cap, which keeps the argmax) as
transformers' ``generate(do_sample=False)``, each step one token's forward against a
cache of the keys and values before it (`jaxattn.engine.kv_cache`), as transformers'
generate runs it. In a causal model, the forward of prompt + continuation gives
exactly the attention each generated token had when it was generated, so the capture
of the whole sequence (from its ids: a round trip through the decoded text could
change them) shows what the model attended to while writing. Several texts generate
together, each at its own position (the padding is never seen: a batch gives each
text's single-text result).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence

import jax

from jaxattn.continuations import check_new_tokens, check_stop_at_eos
from jaxattn.engine.causal_lm import has_lm_head
from jaxattn.engine.oom import out_of_memory
from jaxattn.engine.pipeline import in_order
from jaxattn.engine.tokenize import TokenizedText
from jaxattn.errors import DeviceMemoryError, GenerationTooLongError, InputError, UsageError
from jaxattn.stream import too_long_policy

log = logging.getLogger("jaxattn.engine")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Generation:
    """One prompt and the continuation a decoder generated for it (`Engine.generate`).

    Attributes:
      prompt: the prompt as tokenised for capture (ids, tokens, text; BOS as the
        checkpoint's tokenizer adds it; `truncated` when cut to the model's limit).
      ids: the continuation's token ids (the EOS included when it stopped there).
      tokens: the continuation's word pieces.
      text: the continuation decoded (special tokens left out).
      stop: why it ended, one of `jaxattn.continuations.STOPS`.
    """

    prompt: TokenizedText
    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    text: str
    stop: str

    @property
    def generated_start(self) -> int:
        """Index of the first generated token in prompt + continuation."""
        return self.prompt.length

    @property
    def sequence(self) -> TokenizedText:
        """Prompt + continuation as one tokenised example (what the capture runs)."""
        p = self.prompt
        return dataclasses.replace(
            p,
            ids=p.ids + self.ids,
            type_ids=p.type_ids + (0,) * len(self.ids),
            tokens=p.tokens + self.tokens,
            generated_start=p.length,
            stop=self.stop,
        )


def check_generator(engine) -> None:
    """UsageError unless `engine` is a decoder with its next-token head."""
    c = engine.config
    if not c.causal:
        raise UsageError(
            f"{c.name} is an encoder ({c.family}, bidirectional): generating text needs a "
            "decoder (causal) model with its next-token head (GPT-2, Llama, Gemma, ...)"
        )
    if not has_lm_head(engine):  # asked without copying a tied head to the host
        raise UsageError(
            f"{c.name} has no next-token head: generating text needs the decoder's "
            "checkpoint with its LM head (lm_head.weight, or word embeddings tied to it: "
            "a ...ForCausalLM checkpoint)"
        )


def generate(
    engine,
    texts,
    max_new_tokens: int,
    *,
    stop_at_eos: bool = True,
    too_long: str | None = None,
    ablation=None,
) -> list[Generation | None]:
    """Greedy continuations of decoder prompts (`Engine.generate`); None in place of a
    text skipped under too_long="skip".

    Each text is tokenised as `Engine.capture` tokenises it (the checkpoint's
    tokenizer: BOS where it adds one) and continued one token at a time by the
    argmax of the model's next-token logits, as transformers'
    ``generate(do_sample=False)``.

    Args:
      engine: a loaded decoder (`jaxattn.Engine`) with its next-token head.
      texts: prompts (strings; a decoder reads no pairs).
      max_new_tokens: most tokens to generate per text (>= 1).
      stop_at_eos: end a continuation at an EOS token (`Engine.eos_ids`: the
        checkpoint's generation config, as transformers' generate; kept as its
        last token); False: always max_new_tokens (or the positions' end).
      too_long: a prompt whose tokens + max_new_tokens exceed the model's
        positions: "error" (default; None is the same) raises
        GenerationTooLongError naming the numbers, "truncate" generates until the
        positions are full (a prompt over the limit is cut to it, as `capture`
        cuts it), "skip" leaves it out.
      ablation: a `jaxattn.engine.HeadAblation`: the model with those heads
        disabled generates (as `capture(..., generate=N, ablation=...)` captures it).

    Raises:
      UsageError: an encoder model, a decoder without its next-token head,
        max_new_tokens < 1 or not a whole number.
      InputError: a bad text (GenerationTooLongError, TooLongError: as above; an
        empty prompt where the tokenizer adds no BOS).
    """
    check_generator(engine)
    new = check_new_tokens(max_new_tokens)
    prompts = plan_prompts(engine, texts, new, too_long)
    run = Continuations(engine, prompts, new, stop_at_eos=stop_at_eos, ablation=ablation)
    while not run.done:
        run.step()
    return run.results()


def plan_prompts(engine, texts, new: int, too_long: str | None = None) -> list:
    """Each text's prompt (`TokenizedText`) under `too_long` for `new` tokens, or None
    where "skip" leaves it out: `generate`'s too_long rule, before anything runs.

    Raises:
      GenerationTooLongError: under "error", a prompt whose tokens + `new` exceed the
        model's positions; TooLongError: a prompt alone over them; InputError: an
        empty prompt (no token, not even a BOS, to continue from).
    """
    policy = too_long_policy(too_long)
    limit = engine.config.max_length
    # The prompt alone over the limit: the capture path's rule (error, truncate, skip).
    prompts = engine.tokenize(texts, too_long=policy)
    for i, p in enumerate(prompts):
        if p is not None and p.length == 0:  # nothing to read the next token at
            e = InputError(
                None,
                f"text {i} is empty: a decoder continues a prompt of at least one token "
                f"({engine.config.name}'s tokenizer adds no BOS): give it some text",
            )
            e.index = i  # capture_iter names it by its place in the input
            raise e
        if p is not None and p.length + new > limit and policy == "error":
            raise GenerationTooLongError(i, p.length, new, limit)
    return [
        None if p is None or (policy == "skip" and p.length + new > limit) else p for p in prompts
    ]


def longest(prompt: TokenizedText, new: int, limit: int) -> TokenizedText:
    """`prompt` grown by as many tokens as its continuation of up to `new` may have
    within `limit` positions (their ids 0): the worst case a generation's capture sizes."""
    return _extended(prompt, [0] * max(0, min(new, limit - prompt.length)))


class Continuations:
    """Greedy continuations of prompts, a token of every unfinished one in a group per
    `step`: the loop of `generate`, and what a server runs a step per turn
    (service.generation), for one request's prompts or several requests' together.

    The prompts run in groups (`KVDecoder.groups`: longest first, as many together as
    the engine's budgets allow their key/value caches), one group after the other, so
    only one group's caches are held at a time; the first step of a group puts its
    prompts into the caches (the prefill), each step after it one token. Prompts added
    while it runs (`add`) join the group generating where they fit it
    (`kv_cache.Group.admit`) and none of the run's waits for a later group, or, between
    two groups, the run's last where it holds them (they start with it), else are
    grouped with those waiting.

    Args:
      engine: a decoder with its next-token head (`check_generator`).
      prompts: TokenizedTexts (`plan_prompts`), None where one is left out.
      new: most tokens to generate per prompt (>= 1), or each prompt's.
      stop_at_eos: as `generate`, or each prompt's.
      ablation: as `generate`.
    """

    def __init__(self, engine, prompts, new, *, stop_at_eos=True, ablation=None):
        self.engine = engine
        self.limit = engine.config.max_length
        self._eos = frozenset(engine.eos_ids)
        self._gates = None if ablation is None else ablation.gates(engine.config)
        self.prompts, self.news, self.eos = [], [], []
        self.grown: dict[int, list[int]] = {}
        self.stops: dict[int, str] = {}
        self.ended: set[int] = set()  # `end`ed: no longer generated, no result
        self._needs: dict[int, int] = {}
        self._waiting: list[list[int]] = []
        self._group, self._rows = None, {}  # the group generating, its rows' prompt indices
        self._full = None  # a group a join ran out of device memory in: it takes no more
        self._padded = True  # groups padded as warmup asks, until the device ran out (_start)
        self._append(prompts, new, stop_at_eos)
        self._plan(list(self._needs))

    def _append(self, prompts, new, stop_at_eos) -> list[int]:
        """Record prompts (with each one's N and EOS rule, or one for all): their indices."""
        prompts = list(prompts)
        for i, p in enumerate(prompts):
            if p is not None and not isinstance(p, TokenizedText):
                raise UsageError(
                    f"prompts[{i}] is a {type(p).__name__}: continuations takes the prompts "
                    "of engine.plan_generation(texts, N)[0] (engine.generate(texts, N) "
                    "continues texts)"
                )
        n, at = len(prompts), len(self.prompts)
        news = [new] * n if isinstance(new, int) else list(new)
        flags = (
            [check_stop_at_eos(f) for f in stop_at_eos]
            if isinstance(stop_at_eos, list | tuple)
            else [check_stop_at_eos(stop_at_eos)] * n
        )
        if len(news) != n or len(flags) != n:
            raise UsageError(
                f"{n} prompts with {len(news)} token counts and {len(flags)} EOS rules: "
                "give one for all or one per prompt"
            )
        self.prompts += prompts
        self.news += news
        self.eos += [self._eos if flag else frozenset() for flag in flags]
        decoder = self.engine.kv_decoder
        for i, p in enumerate(prompts, at):
            if p is None:
                continue
            self.grown[i] = []
            if p.length >= self.limit:
                self.stops[i] = "limit"  # a prompt cut to the limit: no position left
            else:
                self._needs[i] = decoder.need(p.length, self.news[i])
        return list(range(at, at + n))

    def _plan(self, indices) -> None:
        """Group these prompts (`KVDecoder.groups`) with those whose group has not started."""
        waiting = [i for group in self._waiting for i in group] + list(indices)
        needs = {i: self._needs[i] for i in waiting}
        self._waiting = self.engine.kv_decoder.groups(needs) if needs else []

    @property
    def done(self) -> bool:
        """Every continuation has ended."""
        return self.over(self.grown)

    def _over(self, i: int) -> bool:
        return i in self.stops or i in self.ended

    def over(self, indices) -> bool:
        """Every continuation of these prompts has ended."""
        return all(self._over(i) for i in indices)

    def end(self, indices) -> None:
        """Generate no more for these prompts (a request that left a shared run): their
        rows are held, their groups not started."""
        self.ended.update(i for i in indices if i in self.grown)

    def _release(self) -> None:
        """The generating group's rows whose prompts are over: free for joining ones."""
        over = [row for row, i in self._rows.items() if self._over(i)]
        self._group.release(over)
        for row in over:
            del self._rows[row]

    def _current(self):
        """The group a prompt added now may join (its over rows released: free for it):
        the group generating, or None where there is none, all its prompts are over, or
        prompts of the run wait for a later group (a prompt joining would keep the group
        generating for its own tokens, and every later one for theirs: those waiting,
        there first, would wait with no bound)."""
        if self._group is None or self._group is self._full or self.over(self._rows.values()):
            return None
        if not all(self.over(group) for group in self._waiting):
            return None
        self._release()
        return self._group

    def _next(self, needs: list[int]):
        """Between two groups (the one generating over, or none) with one group of the
        run's prompts left waiting: that group (its members), where prompts feeding
        `needs` positions (`KVDecoder.need`) and it stay one group (`KVDecoder.groups`,
        as `service.generation.merge` merges): they start with it at the next step,
        behind none of the run's prompts, and none waits after it. Else None."""
        if not needs or (self._group is not None and not self.over(self._rows.values())):
            return None
        left = [group for group in self._waiting if not self.over(group)]
        if len(left) != 1:
            return None
        both = {i: self._needs[i] for i in left[0]}
        both.update((-1 - k, n) for k, n in enumerate(needs))  # the newcomers' keys
        return left[0] if len(self.engine.kv_decoder.groups(both)) == 1 else None

    def joins(self, prompts, new) -> bool:
        """Whether prompts (with each one's N, or one for all) would all join the group
        generating now, or, between two groups, the run's last (`_next`) (`add(...,
        join_only=True)`); adds nothing."""
        d = self.engine.kv_decoder
        news = [new] * len(prompts) if isinstance(new, int) else list(new)
        needs = [
            d.need(p.length, n)
            for p, n in zip(prompts, news, strict=True)
            if p is not None and p.length < self.limit
        ]
        group = self._current()
        if group is None:
            return self._next(needs) is not None
        return not needs or group.room(len(needs), max(needs)) is not None

    def add(self, prompts, new, stop_at_eos=True, *, join_only=False) -> list[int] | None:
        """More prompts (TokenizedTexts, None where one is left out; with each one's N and
        EOS rule, or one for all) for a run under way: their indices. They join the group
        generating now, in free rows, between its steps (`Group.admit`: prefilled, the
        other rows untouched, the batch grown to the smallest size of its ladder holding
        them where too few rows are free), where all fit it (their need within its
        cache, the rows within the engine's budgets) and none of the run's prompts waits
        for a later group (`_current`); between two groups, they join the run's last
        where it holds them (`_next`); else they are grouped with the prompts waiting
        for theirs, after the group generating. `join_only`: None, and nothing added,
        unless they all join the group generating now or the last (`joins`).

        Where the device runs out of memory for the join (the batch's growth, a joining
        prompt's prefill: `Group.admit` frees what it took), they are grouped with those
        waiting (`join_only`: None, nothing added) and the group takes no more joins;
        where anything else raises, it passes, nothing added."""
        if join_only and not self.joins(prompts, new):
            return None
        indices = self._append(prompts, new, stop_at_eos)
        joining = [i for i in indices if i in self._needs]
        if not joining:  # none needs a row (each over at once: its prompt fills the positions)
            return indices
        group = self._current()
        if group is not None:
            rows = self._admit(group, joining, indices)
            if rows is not None:
                self._rows.update(zip(rows, joining, strict=True))
                return indices
        elif (members := self._next([self._needs[i] for i in joining])) is not None:
            members += joining  # they start with the run's last group, at the next step
            return indices
        if join_only:
            self._forget(indices)
            return None
        self._plan(joining)
        return indices

    def _admit(self, group, joining: list[int], indices: list[int]) -> list[int] | None:
        """`Group.admit` of the prompts at `joining` (`add`'s, recorded at `indices`):
        their rows, or None where the device ran out of memory for them (the group then
        closed to joins: `_full`); any other error forgets `indices` and passes."""
        need = max(self._needs[i] for i in joining)
        try:
            return group.admit([self.prompts[i] for i in joining], need)
        except jax.errors.JaxRuntimeError as e:
            if not out_of_memory(e):
                self._forget(indices)
                raise
            log.warning(
                "generation: %d prompts joining a group of %d ran out of device memory: "
                "they wait for a later group, and the group takes no more",
                len(joining),
                group.shape.batch,
            )
            self._full = group
            return None
        except BaseException:
            self._forget(indices)
            raise

    def _forget(self, indices: list[int]) -> None:
        """Undo `_append` of the prompts at `indices` (the last ones recorded)."""
        at = indices[0] if indices else len(self.prompts)
        del self.prompts[at:], self.news[at:], self.eos[at:]
        for i in indices:
            self.grown.pop(i, None)
            self.stops.pop(i, None)
            self._needs.pop(i, None)

    def _start(self, members: list[int]) -> tuple[list[int], object]:
        """(the members started, their `kv_cache.Group`): the group of `members`, or where
        the device runs out of memory for it (its caches, a prefill chunk's scores: the
        engine's budgets are an estimate, as for captures, `jaxattn.engine.oom`), its
        first half in a batch of its size, the rest waiting first, and so on down to one
        prompt.

        Raises:
          DeviceMemoryError: one prompt's caches do not fit the device alone (`index`:
            that prompt's; the group's others wait for their groups, so a caller may
            `end` it and step on).
        """
        decoder = self.engine.kv_decoder
        while True:
            need = max(self._needs[i] for i in members)
            prompts = [self.prompts[i] for i in members]
            try:
                return members, decoder.start(prompts, need, self._gates, self._padded)
            except jax.errors.JaxRuntimeError as e:
                if not out_of_memory(e):
                    raise
                if len(members) == 1 and not self._padded:
                    length = decoder.cache_length(need)
                    mib = decoder.cache_bytes(length) / 2**20
                    error = DeviceMemoryError(
                        f"a prompt of {self.prompts[members[0]].length} tokens continued "
                        f"by up to {self.news[members[0]]} does not fit the device's memory "
                        f"even alone: it feeds {need} positions, a key/value cache of "
                        f"{length} positions ({mib:.1f} MiB) and a prefill chunk of "
                        f"{decoder.chunk(length)}; ask for fewer new tokens or a shorter "
                        f"prompt ({e})"
                    )
                    # which prompt (the others wait for their groups: a caller running
                    # several requests' prompts may fail its request alone and go on)
                    error.index = members[0]
                    raise error from None
                half = (len(members) + 1) // 2
                log.warning(
                    "generation: a group of %d ran out of device memory, %d and %d now",
                    len(members),
                    half,
                    len(members) - half,
                )
                if members[half:]:
                    self._waiting.insert(0, members[half:])
                # from now on in batches their own size: not padded to the largest size
                # a warmup("largest") compiled, which would hold the same memory again
                members, self._padded = members[:half], False

    def step(self) -> int:
        """A token of every unfinished continuation of the group generating (the next
        group started, its prompts prefilled, where the last one has ended); returns how
        many tokens it generated (0 once `done`)."""
        while self.over(self._rows.values()):
            self._group, self._rows = None, {}  # its caches freed
            if not self._waiting:
                return 0
            # its prompts that left (`end`) are not prefilled for nobody
            members = [i for i in self._waiting.pop(0) if not self._over(i)]
            if not members:  # its prompts all left: nothing to prefill
                continue
            members, self._group = self._start(members)
            self._rows = dict(enumerate(members))
        self._release()
        picked = self._group.step()
        made = 0
        for row, i in self._rows.items():
            t, grown = int(picked[row]), self.grown[i]
            grown.append(t)
            made += 1
            if t in self.eos[i]:
                self.stops[i] = "eos"
            elif len(grown) == self.news[i]:
                self.stops[i] = "max_new_tokens"
            elif self.prompts[i].length + len(grown) >= self.limit:
                self.stops[i] = "limit"
        if self.done:
            self._group, self._rows = None, {}  # its caches freed
        return made

    def results(self, indices=None) -> list[Generation | None]:
        """Each prompt's Generation (None where it was left out or `end`ed), once they are
        `over`: every prompt's, or those at `indices` (in their order)."""
        tok = self.engine.tokenizer
        out = []
        for i in range(len(self.prompts)) if indices is None else indices:
            if i not in self.grown or i in self.ended:
                out.append(None)
                continue
            ids = self.grown[i]
            out.append(
                Generation(
                    prompt=self.prompts[i],
                    ids=tuple(ids),
                    tokens=tok.tokens_of(ids),
                    text=tok.decode(ids),
                    stop=self.stops[i],
                )
            )
        return out


def _extended(prompt: TokenizedText, ids: Sequence[int]) -> TokenizedText:
    """The prompt with generated ids appended (tokens are not needed for a forward)."""
    return dataclasses.replace(
        prompt,
        ids=prompt.ids + tuple(ids),
        type_ids=prompt.type_ids + (0,) * len(ids),
        tokens=prompt.tokens + ("",) * len(ids),
    )


def generate_and_stream(
    engine,
    texts,
    max_new_tokens: int,
    spec,
    *,
    stop_at_eos: bool = True,
    too_long: str | None = None,
    ablation=None,
    hold: bool = False,
) -> tuple[list[Generation | None], Iterator]:
    """(each text's Generation, None where too_long="skip" left it out; an iterator of the
    kept ones' Captures of prompt + continuation under `spec` (a `CaptureSpec` the
    engine made), in input order, each as soon as it and all before it are ready):
    `Engine.stream` with ``generate=``. Every text is generated, and its positions
    checked, before this returns; the captures run as the iterator is read. `hold`:
    the caller keeps them all (`Engine.capture`), held as `BatchPipeline.holding` says."""
    gens = generate(
        engine,
        texts,
        max_new_tokens,
        stop_at_eos=stop_at_eos,
        too_long=too_long,
        ablation=ablation,
    )
    index = [i for i, g in enumerate(gens) if g is not None]
    seqs = [gens[i].sequence for i in index]
    spec.check_examples(
        ((i, s.length) for i, s in zip(index, seqs, strict=True)),
        "text {} with its continuation",
    )
    held = engine.pipeline.holding(seqs, spec) if hold else None
    return gens, in_order(engine.run(seqs, spec, ablation, held=held))


def generate_and_capture(
    engine, texts, max_new_tokens: int, *, stop_at_eos: bool = True, **capture
) -> tuple[list[Generation | None], list]:
    """(each text's Generation, None where too_long="skip" left it out; the kept ones'
    Captures of prompt + continuation, in input order): `Engine.capture` with
    ``generate=`` (`generate_and_stream`, its captures collected). `capture`: its other
    keyword arguments (what, layers, heads, dtype, ablation, precision, too_long,
    query_positions, key_positions); the request is checked before anything is
    generated."""
    positions = {k: capture.pop(k, None) for k in ("query_positions", "key_positions")}
    ablation, too_long = capture.pop("ablation", None), capture.pop("too_long", None)
    spec = engine.make_spec(**capture, **positions)
    gens, caps = generate_and_stream(
        engine,
        texts,
        max_new_tokens,
        spec,
        stop_at_eos=stop_at_eos,
        too_long=too_long,
        ablation=ablation,
        hold=True,
    )
    return gens, list(caps)
