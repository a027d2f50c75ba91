"""Greedy decoding with a key/value cache: a generation step costs one token's forward.

    decoder = engine.kv_decoder            # KVDecoder(engine), made once
    group = decoder.start(prompts, need)   # a group of prompts (`Group`), prefilled
    next_ids = group.step()                # each one's next token; its cache grown by one

What `jaxattn.engine.generate` runs. A step feeds each sequence's newest token at its
own position p and attends it to the cached keys and values of positions < p (every
layer's, [L, H_kv, S, K] per sequence, on the device) and to its own, as
transformers' ``generate`` does with its DynamicCache: a step costs a forward of one
token plus attention over p keys, where a forward of the whole sequence (the capture
program) costs T tokens and T^2 scores. The prompt goes into the cache first, in
chunks of at most `CHUNK` positions (the "prefill"): positions 0..n-2 of a prompt of
n tokens, its last token being the first step's input. The layer code is the capture
model's own (`Encoder` with a `LayerCache`: `SelfAttention._cached`), so every
family's attention (grouped heads, RoPE and its scalings, sliding windows, soft caps,
Gemma's norms) and head ablation are the capture's code. The programs always take the
ablation's gates, every head kept (ones) where none is disabled: multiplying by one and
selecting no uniform row leave the numbers as they are, so an ablated generation runs
the plain one's programs (compiled once, `warmup`'s) instead of compiling its own.

Each call is two programs: the model reads the caches and returns the tokens' own
keys and values, then `_write` puts them into the caches, which it is given
(donated) and updates in place. In one program XLA copied both caches before writing
them, twice, every step (the whole cache's bytes four times over, and the memory).
Every program here (prefill, step, write, growth, insertion) goes through the program
cache as the capture step's do (`program_cache.Program`): a new process loads it as
exported instead of tracing the model, donation included.

A group's sequences run together, right-padded, each at its own position: what a
shorter prompt's padding left in the cache is at positions no query of it reads
before its own tokens are written there (a query reads positions < p from the cache),
so a batch gives each sequence its single-sequence result. Group shapes are bucketed:
the cache length S a power of two (at least the longest prompt + the new tokens - 1),
the batch a power of two within the engine's budgets (the cache's bytes under the
output budget, a prefill chunk's [H, C, S + C] scores under the attention budget), so a
server compiles a few programs, not one per request (`warmup` compiles them ahead).
A group's prefill fits its prompts, not its cache (`KVDecoder.prefill_length`): it
runs at the cache length holding its longest prompt (its chunk that length's), where
that length's prefill of the group's batch is one `warmup` compiles, and the caches are
then widened to the group's a length of the ladder at a time (`Group.widen`: zeros after
its own positions, never read before written): a prompt of 8 tokens continued by 1,000
prefills 16 positions, not a chunk of 512, for a widening program a shape (`warmup`).

Prompts may join a group between its steps (`Group.admit`: continuous batching, as
vLLM's and TGI's): into its free rows (padding rows, and rows whose sequence the caller
`release`d as over), the batch grown a size of its ladder at a time where too few are
free (`KVDecoder.grown`: a program that copies the caches into larger ones, the old
and the new on the device together for its duration). A joining prompt is prefilled
in a group of the smallest size (one sequence a device: its prefill costs its own
rows, not all of the group's) and the cache length holding its prompt (its chunk is
its prompt's bucket, not the group's: a prompt of 5 tokens joining a group of 1,024
positions prefills 16, not 512), its caches widened to the group's length a length of
the ladder at a time (`KVDecoder.widened`, zeros after its own), then its row is put
into the group's caches (`KVDecoder.inserted`: one sequence's cache written in place,
the other rows untouched). No program is compiled per join: `warmup` compiles, with
each shape, its growth to the next size, the smallest size's prefill, the widening
into its length and the insertion. The invariant holds for a row taken over, whose
cache is the joining prompt's own whole. A prompt cannot join where its need (prompt
+ new tokens - 1) is past the group's cache length, or where the largest batch of
that length has too few free rows: `admit` returns None and the caller runs it in a
later group (`generate.Continuations.add`).

The cached step computes the same function as the whole-sequence forward, with the
contractions over other shapes: its logits agree within float32 rounding, not bit
for bit (transformers' own cached generate differs from its uncached forward the
same way), so a near tie between two tokens may break either way. The capture of
prompt + continuation afterwards runs the capture program on the ids, exact as any
capture.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxattn.engine import batching, causal_lm, program_cache
from jaxattn.engine.ablation import HeadAblation
from jaxattn.engine.attention import LayerCache
from jaxattn.engine.model import Encoder
from jaxattn.engine.step import matmul_platform
from jaxattn.errors import UsageError

CHUNK = 512  # most prompt positions one prefill call puts into the cache (a power of two)
# The shortest cache; the others double up to the model's positions (`cache_length`): a
# few programs a model (7 for GPT-2's 1,024 positions), each step's attention over at
# most twice the positions it needs.
SHORTEST = 16
# Bytes of a prefill chunk's attention working set per score: the scores, the masked
# scores and the weights, float32, with one more the compiler may hold.
_SCORE_BYTES = 16


@dataclasses.dataclass(frozen=True)
class Shape:
    """One group's program shapes: `batch` sequences (all devices together), a cache of
    `length` positions, prefill chunks of `chunk` positions."""

    batch: int
    length: int
    chunk: int


class KVDecoder:
    """The decoding programs of one loaded decoder (`Engine`): prefill and step, jitted,
    data parallel over the engine's devices like its capture step.

    Args:
      engine: a decoder with its next-token head (`generate.check_generator`).
    """

    def __init__(self, engine):
        # The engine holds its decoder (`Engine.kv_decoder`): a weak reference back, so
        # no cycle keeps either (the weights, the head on the devices) alive after its
        # last user lets go, as the engine's other parts.
        self._engine = weakref.ref(engine)
        c = self.config = engine.config
        step = engine.step
        self.devices = engine.devices
        mesh = Mesh(np.asarray(self.devices), ("data",))
        replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
        model = Encoder(c, platform=matmul_platform(self.devices[0]), layer_loop=step.layer_loop)
        spec = engine.make_spec(("keys", "values"))  # every layer, every head
        # The next-token head on the devices: a tied one is the word embedding the
        # params already hold there (Llama-3.2-1B's is 1 GB in float32: no second copy).
        self._w = None
        if not c.tied_lm_head:
            self._w = jax.device_put(
                np.asarray(causal_lm.unembedding(engine), np.float32), replicated
            )
        self._batch, self._replicated = batch, replicated
        self._kept = jax.device_put(HeadAblation().gates(c), replicated)  # every head
        ins = (replicated, replicated, batch, batch, batch, batch, replicated)
        # Kept on disk across processes as the capture step's programs are
        # (`program_cache`; None: off), under a key of what shapes them besides their
        # arguments: the model (its config: the soft cap, the tied head), the weights'
        # signature, the layer loop, the matmul platform and the spec. Whatever the
        # engine's host memory policy: these programs write to device memory.
        self.program_cache = program_cache.ProgramCache.for_step(
            repr(
                (
                    "generation",
                    c,
                    program_cache.signature(step.params),
                    step.layer_loop,
                    model.platform,
                    spec,
                )
            ),
            self.devices,
        )

        def program(name, fun, **options):
            return program_cache.Program(name, fun, self.program_cache, **options)

        # Module functions given the model, not bound methods: a jitted function holds
        # its function, and a method would hold the decoder (a cycle). The weights and
        # the head (the first two arguments) are the same arrays at every call.
        prefill = functools.partial(_prefill_fn, model, spec)
        step_fn = functools.partial(_step_fn, model, spec, c.lm_softcap)
        model_args = dict(in_shardings=ins, fixed=(0, 1))
        self._prefill = program("prefill", prefill, out_shardings=(batch,) * 2, **model_args)
        self._step = program("step", step_fn, out_shardings=(batch,) * 3, **model_args)
        # The new rows go into the caches in a program of its own, whose only use of the
        # caches is that write: donated, they are updated in place (in the program that
        # also reads them, XLA copies both caches before writing, twice).
        self._write = program(
            "write", _write, in_shardings=(batch,) * 5, out_shardings=(batch,) * 2, donate=(0, 1)
        )
        # A group grown to a larger batch for prompts joining it, or a joining prompt's
        # caches to the group's length (`Group.admit`): the caches copied into the
        # larger ones, the new rows and positions zero (the batch and length static).
        self._grow = program(
            "grow", _grow, static=2, in_shardings=(batch,) * 2, out_shardings=(batch,) * 2
        )
        # A joining prompt's row, prefilled in a group of its own, put into a group's
        # caches (donated: updated in place, the other rows untouched).
        self._insert = program(
            "insert",
            _insert,
            in_shardings=(batch,) * 4 + (replicated,) * 2,
            out_shardings=(batch,) * 2,
            donate=(0, 1),
        )
        self._compiled: set[tuple] = set()
        self._largest = False  # warmed up at the largest batch sizes only: groups pad to them

    @property
    def engine(self):
        """The engine whose decoder this is."""
        return self._engine()

    # -- shapes ----------------------------------------------------------------------

    def cache_bytes(self, length: int) -> int:
        """Bytes of one sequence's cache of `length` positions (keys and values, every
        layer, float32)."""
        c = self.config
        return 2 * c.num_layers * c.kv_heads * length * c.head_dim * 4

    def need(self, length: int, new: int) -> int:
        """The cache positions a prompt of `length` tokens continued by up to `new` feeds
        (the last token generated is never fed), within the model's positions."""
        return max(1, min(length + new - 1, self.config.max_length))

    def cache_length(self, need: int) -> int:
        """The cache length of a group whose sequences feed up to `need` positions
        (`need`): the smallest power of two from `SHORTEST` holding them (it may pass the
        model's positions: those rows stay unread)."""
        return max(SHORTEST, 1 << (need - 1).bit_length())

    def lengths(self) -> list[int]:
        """Every cache length a generation may use (`cache_length`), shortest first."""
        out = [SHORTEST]
        while out[-1] < self.config.max_length:
            out.append(out[-1] * 2)
        return out

    def prefill_length(self, longest: int, batch: int, length: int) -> int:
        """The cache length a group of `batch` rows with a cache of `length` positions,
        its longest prompt of `longest` tokens, is prefilled at (then widened to
        `length`): the shortest of the ladder (`lengths`) holding its prompts' positions
        (`cache_length` of `longest` - 1) at which a prefill of `batch` rows is one
        `warmup` compiles (`_prefill_batches`), else `length`. Its chunk is that
        length's: a prompt of 8 tokens in a group of 1,024 positions prefills 16, not
        512."""
        own = self.cache_length(longest - 1)
        for at in self.lengths():
            if own <= at < length and batch in self._prefill_batches(at):
                return at
        return length

    def _prefill_batches(self, length: int) -> set[int]:
        """The batch sizes whose prefill of a cache of `length` positions `warmup`
        compiles (`_compile`): every size of its ladder, or ("largest") the largest and
        the smallest (a joining prompt's)."""
        sizes = self.sizes(length)
        return {sizes[0], sizes[-1]} if self._largest else set(sizes)

    def chunk(self, length: int) -> int:
        """Prefill chunk positions for a cache of `length`: all of it up to `CHUNK`, else
        `CHUNK` (both powers of two: a chunk never runs past the cache's end)."""
        return min(length, CHUNK)

    def largest_batch(self, length: int) -> int:
        """Most sequences per device of a group with a cache of `length` positions (a
        power of two, at least 1: `batching.batch_size` under the engine's budgets): the
        cache and a prefill chunk's own keys and values (returned beside it before they
        are written in) under the output budget, the chunk's scores under the attention
        budget."""
        c, chunk = self.config, self.chunk(length)
        held = self.cache_bytes(length) + self.cache_bytes(chunk)
        # a chunk's queries score the cache's keys and its own (`SelfAttention._cached`)
        scores = c.num_heads * chunk * (length + chunk) * _SCORE_BYTES
        return batching.batch_size(chunk, lambda _: held, self.engine.budgets, lambda _: scores)

    def shape(self, count: int, length: int, padded: bool = True) -> Shape:
        """The shape of a group of `count` sequences (at most `largest_batch` a device)
        with a cache of `length` positions: the batch the smallest size of the ladder
        holding them (the largest once `warmup` compiled only those, unless not
        `padded`: padding rows cost less than a compile on a device where a compile
        costs seconds, but not memory the device lacks)."""
        sizes = self.sizes(length)
        fits = [s for s in sizes if s >= count and not (self._largest and padded)]
        return Shape(min(fits, default=sizes[-1]), length, self.chunk(length))

    def sizes(self, length: int) -> list[int]:
        """The batch sizes (all devices) of a group with a cache of `length` positions,
        smallest first: the ladder of `largest_batch` a device (`batching.ladder`)."""
        ladder = batching.ladder(self.largest_batch(length), self.engine.budgets.size_step)
        return [s * len(self.devices) for s in reversed(ladder)]

    def groups(self, needs: dict) -> list[list[int]]:
        """Sequences {index: the positions it feeds (`need`)} in groups run together
        (indices): the longest first, each group as many as its cache length allows."""
        order = sorted(needs, key=lambda i: -needs[i])
        out = []
        while order:
            length = self.cache_length(needs[order[0]])
            take = self.largest_batch(length) * len(self.devices)
            out.append(order[:take])
            order = order[take:]
        return out

    # -- the programs ----------------------------------------------------------------

    def _call(self, program, kind: str, ids, starts, keys, values, gates):
        """Run `program` (prefill or step) on a group's tokens, then write their keys and
        values into the caches: (the step's next ids or None, keys, values)."""
        self._compiled.add((kind, ids.shape, keys.shape[-2]))
        self._compiled.add(("write", ids.shape, keys.shape[-2]))
        params = self.engine.step.params
        # Placed as `warmup` compiles them: host arrays would be other input types to
        # jit (no sharding), so each first call would trace and compile again.
        ids, starts = jax.device_put((ids, starts), self._batch)
        *picked, k, v = program(params, self._head(params), ids, starts, keys, values, gates)
        keys, values = self._write(keys, values, k, v, starts)
        return (picked[0] if picked else None), keys, values

    def inserted(self, keys, values, new_keys, new_values, src: int, row: int):
        """The caches (keys, values) with row `src` of another group's (new_keys,
        new_values, of the same length: a joining prompt's, `Group.admit`) put in `row`,
        in place: one sequence's cache bytes written."""
        pair = (keys.shape[0], new_keys.shape[0])
        self._compiled.add(("insert", pair, keys.shape[-2]))
        where = jax.device_put((np.int32(src), np.int32(row)), self._replicated)
        return self._insert(keys, values, new_keys, new_values, *where)

    def grown(self, keys, values, batch: int):
        """The caches (keys, values) of a group grown to `batch` rows (`Group.admit`: the
        next size of its ladder): its rows first, as they were, the new ones zero. A
        program of its own that reads the old caches once and writes the new ones (the
        old freed after: the device holds both for its duration; a step's bytes of the
        cache read, once)."""
        self._compiled.add(("grow", (keys.shape[0], batch), keys.shape[-2]))
        return self._grow(batch, keys.shape[-2], keys, values)

    def widened(self, keys, values):
        """The caches (keys, values) of a group widened to twice their positions, the
        next length of the ladder (`lengths`), as `warmup` compiles it: its positions
        first, as they were, the new ones zero. `Group.widen` steps a group prefilled at
        the length holding its prompts up to its cache's (a joining prompt's group to
        the group it joins: `Group.admit`)."""
        length = keys.shape[-2]
        self._compiled.add(("widen", keys.shape[0], (length, 2 * length)))
        return self._grow(keys.shape[0], 2 * length, keys, values)

    def gates(self, gates=None):
        """A run's ablation gates (keep [L, H], uniform [L, H]: `HeadAblation.gates`) on
        the devices, as the programs take them; None: every head kept."""
        return self._kept if gates is None else jax.device_put(gates, self._replicated)

    def _head(self, params):
        """The next-token head [V, D] on the devices (`unembedding`)."""
        return params["embeddings"]["word"] if self._w is None else self._w

    @property
    def compiled(self) -> int:
        """How many (program, shape) pairs have run or been compiled."""
        return len(self._compiled)

    def empty(self, shape: Shape):
        """Zeroed caches (keys, values) of a group of `shape`, on the devices."""
        c = self.config
        dims = (shape.batch, c.num_layers, c.kv_heads, shape.length, c.head_dim)
        return tuple(jax.device_put(np.zeros(dims, np.float32), self._batch) for _ in "kv")

    def start(self, prompts, need: int, gates=None, padded: bool = True) -> Group:
        """A group of `prompts` (TokenizedTexts, at most `largest_batch` a device) whose
        continuations feed up to `need` positions (`need`: of the longest), its caches
        filled with every prompt but its last token; `padded`: as `shape`'s (False: the
        smallest batch holding them, whatever `warmup` compiled)."""
        length = self.cache_length(need)
        batch = self.shape(len(prompts), length, padded).batch
        at = self.prefill_length(max(p.length for p in prompts), batch, length)
        group = Group(self, Shape(batch, at, self.chunk(at)), prompts, gates)
        group.widen(length)
        return group

    def warmup(self, sizes: str = "all", stop=None) -> int:
        """Compile the prefill and step programs of every cache length (`lengths`), for
        every batch size of the ladder ("all") or the largest only ("largest": groups
        then pad to it, `shape`); returns how many programs this compiled. `stop`: as
        `Engine.warmup`'s."""
        if sizes not in batching.WARMUP_SIZES:
            valid = ", ".join(batching.WARMUP_SIZES)
            raise UsageError(f"unknown warmup sizes {sizes!r}: valid are {valid}")
        made, self._largest = 0, sizes == "largest"
        for length in self.lengths():
            ladder = batching.ladder(self.largest_batch(length), self.engine.budgets.size_step)
            for size in ladder[: len(ladder) if sizes == "all" else 1]:
                if stop is not None and stop():
                    return made
                made += self._compile(Shape(size * len(self.devices), length, self.chunk(length)))
        return made

    def _compile(self, shape: Shape) -> int:
        """Compile a shape's prefill and step, their writes into the caches, and what a
        prompt joining a group of it runs (`Group.admit`): the batch's growth to the
        next size of its length, the prefill (and write) of the smallest size (a
        shorter prompt's: of its length's shape), its rows' insertion, and the widening
        of this batch's caches and the smallest's, from the shortest length a group of
        it prefills at (`prefill_length`) into this one, a length of the ladder at a
        time; without running them.
        Returns how many were not compiled before."""
        c = self.config

        def array(batch, width=shape.length, dtype=jnp.float32):
            if dtype != jnp.float32:
                return jax.ShapeDtypeStruct((batch, width), dtype, sharding=self._batch)
            dims = (batch, c.num_layers, c.kv_heads, width, c.head_dim)
            return jax.ShapeDtypeStruct(dims, dtype, sharding=self._batch)

        def scalar():
            return jax.ShapeDtypeStruct((), jnp.int32, sharding=self._replicated)

        gates = tuple(
            jax.ShapeDtypeStruct(g.shape, g.dtype, sharding=self._replicated) for g in self._kept
        )

        params, n = self.engine.step.params, shape.batch
        sizes = self.sizes(shape.length)
        bigger, smallest = [s for s in sizes if s > n], sizes[0]
        programs = []
        for batch, kinds in ((n, ("prefill", "step")), (smallest, ("prefill",))):
            k = array(batch)
            starts = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=self._batch)
            for kind in kinds:
                program, width = (
                    (self._prefill, shape.chunk) if kind == "prefill" else (self._step, 1)
                )
                ids, rows = array(batch, width, jnp.int32), array(batch, width)
                head = self._head(params)
                programs.append(
                    (
                        (kind, (batch, width), shape.length),
                        program,
                        (params, head, ids, starts, k, k, gates),
                    )
                )
                programs.append(
                    (
                        ("write", (batch, width), shape.length),
                        self._write,
                        (k, k, rows, rows, starts),
                    )
                )
        k, small = array(n), array(smallest)
        programs.append(
            (
                ("insert", (n, smallest), shape.length),
                self._insert,
                (k, k, small, small, scalar(), scalar()),
            )
        )
        if bigger:
            grow = (bigger[0], shape.length, k, k)
            programs.append((("grow", (n, bigger[0]), shape.length), self._grow, grow))
        for batch in (n, smallest):  # from the shortest length a group of it prefills at
            width = self.prefill_length(1, batch, shape.length)
            while width < shape.length:
                half = array(batch, width)
                key = ("widen", batch, (width, 2 * width))
                programs.append((key, self._grow, (batch, 2 * width, half, half)))
                width *= 2
        made = 0
        for key, program, args in programs:
            if key not in self._compiled:
                program.compiled(*args)
                self._compiled.add(key)
                made += 1
        return made


class Group:
    """Sequences generating together: their caches on the device, each one's position.

    `step(held)` feeds each active row's newest token and returns the next ones; the
    caller decides when a sequence has ended: a row in `held` stays where it is (it
    keeps computing, its position and cache no longer move), a row `release`d is free
    for a prompt that joins the group between steps (`admit`), as are the padding rows.
    """

    def __init__(self, decoder: KVDecoder, shape: Shape, prompts, gates):
        self.decoder, self.shape, self.gates = decoder, shape, decoder.gates(gates)
        # position of the token each row feeds next (its last prompt token's at first),
        # that token, and whether the row holds a sequence that goes on (not padding, not
        # released)
        self.positions = np.zeros(shape.batch, np.int32)
        self.tokens = np.zeros(shape.batch, np.int32)
        self.active = np.zeros(shape.batch, bool)
        self.keys, self.values = decoder.empty(shape)
        self._prefill(prompts)

    @property
    def free(self) -> list[int]:
        """The rows a joining prompt may take: padding rows and released ones."""
        return np.flatnonzero(~self.active).tolist()

    def release(self, rows) -> None:
        """These rows' sequences are over: they no longer move, and `admit` may give
        them to new prompts."""
        self.active[list(rows)] = False

    def room(self, count: int, need: int) -> int | None:
        """The batch the group would have once `count` prompts joined it (`admit`),
        feeding up to `need` positions: its own where its free rows hold them, else the
        smallest size of its cache length's ladder that does (`KVDecoder.sizes`); None
        where they cannot join (the need past the cache, or more prompts than the
        largest batch's free rows)."""
        if need > self.shape.length:
            return None
        if count <= len(self.free):
            return self.shape.batch
        rows = int(self.active.sum()) + count
        return next((s for s in self.decoder.sizes(self.shape.length) if s >= rows), None)

    def admit(self, prompts, need: int) -> list[int] | None:
        """Prompts joining the group between steps, feeding up to `need` positions
        (`KVDecoder.need`, at most the group's cache length): their rows (free ones, the
        batch grown first where too few are free, a size of the ladder at a time up to
        the smallest holding them: `KVDecoder.grown`), each prefilled in a group of the
        smallest size and the cache length holding its prompt (`cache_length`: its
        chunk that length's, not the group's), widened to the group's
        (`KVDecoder.widened`), and its whole row's cache put in its row
        (`KVDecoder.inserted`), the other rows' caches untouched; None, and nothing
        changed, where they do not fit (`room`). A row's earlier sequence leaves
        nothing behind: the inserted cache is the joining prompt's own, what its prefill
        group's padding left beyond its prompt never read (a query at p reads < p), the
        widened positions zero. Where a growth, a prefill, a widening or an insertion
        raises (the device out of memory), the rows taken so far are free again before
        it passes on: no row generates for a prompt that did not join (a growth made
        stays, its rows free)."""
        batch = self.room(len(prompts), need)
        if batch is None:
            return None
        d, sizes = self.decoder, self.decoder.sizes(self.shape.length)
        for size in sizes:
            if self.shape.batch < size <= batch:  # a step of the ladder (`warmup`'s)
                more = size - self.shape.batch
                self.keys, self.values = d.grown(self.keys, self.values, size)
                self.shape = dataclasses.replace(self.shape, batch=size)
                self.positions = np.concatenate([self.positions, np.zeros(more, np.int32)])
                self.tokens = np.concatenate([self.tokens, np.zeros(more, np.int32)])
                self.active = np.concatenate([self.active, np.zeros(more, bool)])
        rows = self.free[: len(prompts)]
        # Prefilled in groups of the smallest size (one sequence a device) and the
        # cache length holding their prompts, their rows then put into this group's
        # caches: a prefill costs the joining prompts' rows and positions, not all of
        # this group's.
        small = sizes[0]
        try:
            for at in range(0, len(rows), small):
                joining = prompts[at : at + small]
                longest = max(p.length for p in joining)
                length = d.prefill_length(longest, small, self.shape.length)
                part = Group(d, Shape(small, length, d.chunk(length)), joining, self.gates)
                part.widen(self.shape.length)
                keys, values = part.keys, part.values
                for src, row in enumerate(rows[at : at + small]):
                    self.keys, self.values = d.inserted(
                        self.keys, self.values, keys, values, src, row
                    )
                    self.positions[row] = part.positions[src]
                    self.tokens[row] = part.tokens[src]
                    self.active[row] = True
        except BaseException:
            self.release(rows)  # none of them joined
            raise
        return rows

    def widen(self, length: int) -> None:
        """The group's caches widened to `length` positions (`KVDecoder.widened`: a
        group prefilled at the cache length holding its prompts, `prefill_length`),
        its chunk that length's; a length of the ladder at a time, each one's caches
        let go before the next (the device holds 1.5 times the widest's bytes at most,
        as `KVDecoder.grown`)."""
        d = self.decoder
        while self.shape.length < length:
            wider = 2 * self.shape.length
            self.keys, self.values = d.widened(self.keys, self.values)
            self.shape = dataclasses.replace(self.shape, length=wider, chunk=d.chunk(wider))

    def _prefill(self, prompts) -> None:
        """The prompts in the first rows: active, at their last token, positions 0..n-2
        of each written into its row's cache, `shape.chunk` at a time."""
        n = len(prompts)
        lengths = np.array([p.length for p in prompts])
        self.positions[:n] = lengths - 1
        self.tokens[:n] = [p.ids[-1] for p in prompts]
        self.active[:n] = True
        chunk, d, longest = self.shape.chunk, self.decoder, int(lengths.max()) - 1
        width = -(-longest // chunk) * chunk
        ids = np.zeros((self.shape.batch, width), np.int32)
        for row, p in enumerate(prompts):
            ids[row, : p.length - 1] = p.ids[:-1]
        for at in range(0, longest, chunk):
            starts = np.full(self.shape.batch, at, np.int32)
            _, self.keys, self.values = d._call(
                d._prefill,
                "prefill",
                ids[:, at : at + chunk],
                starts,
                self.keys,
                self.values,
                self.gates,
            )

    def step(self, held=()) -> np.ndarray:
        """Feed every row's current token at its position: the next tokens [batch] (only
        active rows' mean anything). Active rows in `held` do not move on (their result
        is to be ignored), as rows not active.

        Raises:
          UsageError: a moving sequence's position past the cache (more steps than the
            group was started for): its write would be clamped to the cache's end.
        """
        d, length = self.decoder, self.shape.length
        moving = self.active.copy()
        moving[list(held)] = False
        past = np.flatnonzero(moving & (self.positions >= length))
        if past.size:
            row = int(past[0])
            raise UsageError(
                f"sequence {row} of the group would be fed at position "
                f"{self.positions[row]}, past its cache of {length} positions: a group "
                "feeds at most the positions it was started for (its need)"
            )
        # a held row that ended at the cache's end feeds its last position again
        fed = np.minimum(self.positions, length - 1)
        picked, self.keys, self.values = d._call(
            d._step, "step", self.tokens[:, None], fed, self.keys, self.values, self.gates
        )
        picked = np.asarray(picked).astype(np.int32)
        self.tokens = np.where(moving, picked, self.tokens)
        self.positions = np.where(moving, self.positions + 1, self.positions)
        return picked


def _apply(model, spec, params, ids, starts, keys, values, gates):
    """Every sequence's tokens ids [B, T] at positions starts.. through `model` (an
    `Encoder`) with its cache (keys, values [B, L, H_kv, S, K], read only): (the final
    hidden states [B, T, D], the tokens' own keys and values [B, L, H_kv, T, K])."""

    def one(i, start, k, v):
        cache = LayerCache(k=k, v=v, start=start)
        mask = jnp.ones(i.shape, bool)
        out, x = model.apply(
            {"params": params}, i, jnp.zeros_like(i), mask, spec, gates, cache=cache
        )
        return x, out["keys"], out["values"]

    return jax.vmap(one)(ids, starts, keys, values)


def _prefill_fn(model, spec, params, w, ids, starts, keys, values, gates):
    del w  # the prefill reads no logits
    _, keys, values = _apply(model, spec, params, ids, starts, keys, values, gates)
    return keys, values


def _step_fn(model, spec, softcap, params, w, ids, starts, keys, values, gates):
    x, keys, values = _apply(model, spec, params, ids, starts, keys, values, gates)
    return _next_ids(x[:, -1], w, softcap), keys, values


def _write(keys, values, new_keys, new_values, starts):
    """keys, values [B, L, H_kv, S, K] with each sequence's new rows [B, L, H_kv, T, K]
    written at its own positions starts..starts+T-1."""

    def one(cache, new, start):
        return lax.dynamic_update_slice_in_dim(cache, new.astype(cache.dtype), start, axis=2)

    return jax.vmap(one)(keys, new_keys, starts), jax.vmap(one)(values, new_values, starts)


def _insert(keys, values, new_keys, new_values, src, row):
    """keys, values [B, L, H_kv, S, K] with row `src` of new_keys, new_values [b, L,
    H_kv, S, K] written in row `row`."""

    def one(cache, new):
        part = lax.dynamic_slice_in_dim(new, src, 1, axis=0)
        return lax.dynamic_update_slice_in_dim(cache, part, row, axis=0)

    return one(keys, new_keys), one(values, new_values)


def _grow(batch: int, length: int, keys, values):
    """keys, values [B, L, H_kv, S, K] grown to `batch` rows of `length` positions, the
    new rows and positions zero."""

    def pad(cache):
        b, _, _, s, _ = cache.shape
        return jnp.pad(cache, [(0, batch - b), (0, 0), (0, 0), (0, length - s), (0, 0)])

    return pad(keys), pad(values)


def _next_ids(h, w, softcap: float = 0.0):
    """argmax over the vocabulary of each row's logits (`causal_lm.logits`): h [B, D],
    w [V, D] -> [B]."""
    return jnp.argmax(causal_lm.logits(h, w, softcap), axis=-1)
