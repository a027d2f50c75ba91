"""CaptureRequest -> a validated (spec, tokenised examples, codec, chunk size).

Every field is checked before anything is queued or computed; a bad one raises
`RequestError` with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a server limit),
a message in wire terms naming the field, its index and the valid range, and
the field's name (and the limit's) for the `jaxattn-field` / `jaxattn-limit`
trailers (attention.proto). Layers and heads are checked here against the wire's
rule (0..count-1: no negative indices, which the engine would accept); the
maps' query and key positions (negative ones from each text's end) against
every text; the dtype rules are the engine's own (`Engine.make_spec`). A request
that generates (`generate`: `service.generation`) is checked against the model
(it must generate) and the server's max_new_tokens, and counted at its worst case,
each text at prompt + generate tokens, for every limit after it.
"""

from __future__ import annotations

import dataclasses

import grpc

from jaxattn.errors import GenerationTooLongError, TooLongError
from jaxattn.quantities import MAPS, QUANTITIES
from jaxattn.selection import bad_position, position_limit
from jaxattn.spec import DEFAULT_WHAT
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs
from service.generation import DEFAULT_MAX_NEW_TOKENS, GenerationAsk, generator_problem
from service.limits import OutputLimits

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


# Status details travel in a trailer (HTTP/2 header): keep them far below
# gRPC's metadata limits, whatever a client put in the field they quote.
MAX_DETAILS = 1024


class RequestError(Exception):
    """A request the server refuses, with the status code to answer it with.

    Attributes:
      field: the offending CaptureRequest field ("texts[3]", "layers", ...), sent
        as the `jaxattn-field` trailer; None when no one field is at fault.
      limit: the server limit hit ("max_texts", "max_tokens", "max_example_bytes", ...),
        sent as `jaxattn-limit`.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        field: str | None = None,
        limit: str | None = None,
    ):
        if len(message) > MAX_DETAILS:
            message = f"{message[: MAX_DETAILS - 40]}... ({len(message)} characters)"
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.limit = limit

    def trailers(self) -> tuple[tuple[str, str], ...]:
        """The machine-readable trailing metadata documented in attention.proto."""
        pairs = (("jaxattn-field", self.field), ("jaxattn-limit", self.limit))
        return tuple((k, v) for k, v in pairs if v)


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    """A request that passed validation."""

    spec: object  # jaxattn.CaptureSpec
    tokenized: list
    codec: str
    max_chunk_bytes: int
    coalesce: bool = False  # CaptureRequest.coalesce: several items per message
    weights_in_header: bool = False  # CaptureRequest.weights_in_header: no metadata send
    # CaptureRequest.generate: the prompts to continue first; `tokenized` then holds
    # each text at its longest (prompt + generate, within the positions): the worst
    # case the limits, the quotas and admission count
    generation: GenerationAsk | None = None

    @property
    def tokens(self) -> int:
        return sum(e.length for e in self.tokenized)

    @property
    def work_tokens(self) -> int:
        """The most tokens the request's forwards process, what `tokens_per_s` charges:
        its texts once (the capture), and with `generation` each generated sequence's
        tokens but its last once more (a text of p prompt tokens grown to L: the prefill
        of p - 1 of them into the key/value cache, then a step of one token for each of
        the L - p it generates, `jaxattn.engine.kv_cache`), since a generation of N
        tokens runs its own forwards before the capture. A prompt with no room to grow
        (cut to the model's positions: L = p) runs none."""
        if self.generation is None:
            return self.tokens
        prompts = [p for p in self.generation.prompts if p is not None]  # as `tokenized`
        grown = zip(self.tokenized, prompts, strict=True)
        return self.tokens + sum(e.length - 1 for e, p in grown if e.length > p.length)


def _enum(value: int, table: dict, enum_type, field: str):
    if value not in table:
        valid = ", ".join(f"{enum_type.Name(v)} ({v})" for v in sorted(table) if v)
        raise RequestError(
            INVALID,
            f"{field} {value} is not a valid {enum_type.DESCRIPTOR.name}: valid values are {valid}",
            field,
        )
    return table[value]


def _indices(values, count: int, field: str) -> list[int] | None:
    """Check a repeated index field: each in 0..count-1, no duplicates (None: all)."""
    seen: dict[int, int] = {}
    for i, v in enumerate(values):
        if not 0 <= v < count:
            raise RequestError(
                INVALID,
                f"{field} index {v} ({field}[{i}]) is out of range: valid "
                f"{field} are 0..{count - 1} (ModelInfo.{field})",
                f"{field}[{i}]",
            )
        if v in seen:
            raise RequestError(
                INVALID,
                f"{field} index {v} ({field}[{i}]) is a duplicate of "
                f"{field}[{seen[v]}]: send each index once",
                f"{field}[{i}]",
            )
        seen[v] = i
    return list(values) or None


def _positions(values, field: str, what, max_length: int) -> list[int] | None:
    """Check a repeated position field: no duplicates, at most `position_limit(max_length)`
    of them (the model's longest input, ModelInfo.max_positions, or MAX_POSITIONS), and
    only for a request of a map (None: every position). Each example's are `_fits`'s."""
    if not values:
        return None
    if not set(what or DEFAULT_WHAT) & set(MAPS):
        raise RequestError(
            INVALID,
            f"{field} selects rows or keys of the maps ({', '.join(MAPS)}); this request "
            f"asks for none ({', '.join(what)}): leave {field} empty, or ask for a map too",
            field,
        )
    most, bound = position_limit(max_length)  # as the engine and the client bound them
    if len(values) > most:
        raise RequestError(
            INVALID,
            f"{field} holds {len(values)} positions, more than {bound}",
            field,
        )
    seen: dict[int, int] = {}
    for i, v in enumerate(values):
        if v in seen:
            raise RequestError(
                INVALID,
                f"{field} position {v} ({field}[{i}]) is a duplicate of "
                f"{field}[{seen[v]}]: send each position once",
                f"{field}[{i}]",
            )
        seen[v] = i
    return list(values)


def _fits(values, field: str, tokenized, shortest=None) -> None:
    """Each of a position field's `values` names a token of its own in every example, at
    every length it may have: its own, or with `shortest` (a generation's: each
    example's fewest tokens with its continuation) any from that to its own."""
    if not values:
        return
    checked: set[tuple[int, int]] = set()
    for k, e in enumerate(tokenized):
        lo = e.length if shortest is None else shortest[k]
        if (lo, e.length) in checked:
            continue
        checked.add((lo, e.length))
        for length in _lengths_to_check(values, lo, e.length):
            bad = bad_position(values, length)
            if bad is None:
                continue
            i, earlier = bad
            whose = f"texts[{k}]" if shortest is None else f"texts[{k}] with its continuation"
            why = (
                f"outside {whose} of {length} tokens: valid positions there are "
                f"0..{length - 1} (or -{length}..-1 from its end)"
                if earlier is None
                else f"token {values[i] % length} of {whose} ({length} tokens), as "
                f"{field}[{earlier}] {values[earlier]} does: name each token once"
            )
            raise RequestError(
                INVALID, f"{field} position {values[i]} ({field}[{i}]) is {why}", f"{field}[{i}]"
            )


def _lengths_to_check(values, lo: int, hi: int) -> list[int]:
    """The lengths in lo..hi at which `values` may fail: `lo` (a position within it is
    within every longer one), and those where a position p >= 0 and one -j < 0 name one
    token (p + j); none other can."""
    negatives = {-v for v in values if v < 0}
    later = {v + j for v in values if v >= 0 for j in negatives if lo < v + j <= hi}
    return [lo, *sorted(later)]


def _what(names, available, refused=None) -> list[str] | None:
    """The asked-for quantities, each known and computed by this model (`available`,
    ModelInfo.quantities), or None for the default; `refused`: name -> why the model
    refuses it (`ModelConfig.refused_quantities`: a decoder's head_stats names its own)."""
    for i, name in enumerate(names):
        if name not in available:
            why = "is not computed by this model" if name in QUANTITIES else "is not a quantity"
            why = (refused or {}).get(name, why)
            raise RequestError(
                INVALID,
                f"what[{i}] {name!r} {why}: valid names here are "
                f"{', '.join(available)} (ModelInfo.quantities)",
                f"what[{i}]",
            )
    return list(names) or None


def _too_long(e: TooLongError) -> RequestError:
    """The engine's TooLongError, in wire terms."""
    return RequestError(
        INVALID,
        f"texts[{e.index}] is {e.length} tokens, over the model's limit of {e.limit} "
        f"(ModelInfo.max_positions): {e.advice.wire}",
        f"texts[{e.index}]",
    )


def _too_long_to_generate(e: GenerationTooLongError) -> RequestError:
    """The engine's GenerationTooLongError, in wire terms."""
    return RequestError(
        INVALID,
        f"texts[{e.index}]: its {e.prompt} prompt tokens + generate {e.new} new tokens = "
        f"{e.prompt + e.new}, over the model's limit of {e.limit} positions "
        f"(ModelInfo.max_positions): {e.advice.wire}",
        f"texts[{e.index}]",
    )


def _chunk_bytes(value: int) -> int:
    if value == 0:
        return codecs.DEFAULT_MAX_CHUNK_BYTES
    lo, hi = codecs.MIN_MAX_CHUNK_BYTES, codecs.MAX_MAX_CHUNK_BYTES
    if not lo <= value <= hi:
        raise RequestError(
            INVALID,
            f"max_chunk_bytes {value} is out of range: valid values are 0 (the default, "
            f"{codecs.DEFAULT_MAX_CHUNK_BYTES}) or {lo}..{hi}",
            "max_chunk_bytes",
        )
    return value


class RequestParser:
    """Validates requests against one engine and the server's limits.

    Handler threads call `parse` concurrently: `Engine.tokenize` shares no
    mutable state between calls.
    """

    def __init__(
        self,
        engine,
        *,
        max_texts: int,
        max_tokens: int,
        max_request_bytes: int = 0,
        max_metadata_bytes: int = 0,
        max_example_bytes: int = 0,
        max_buffered_bytes: int = 0,
        max_result_bytes: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ):
        self.engine = engine
        self.max_texts = max_texts
        self.max_tokens = max_tokens
        # Enforced by gRPC (service/server.py); kept here to be reported in ModelInfo.
        self.max_request_bytes = max_request_bytes
        self.max_metadata_bytes = max_metadata_bytes
        # CaptureRequest.generate: why this model cannot generate (None: it can), and the
        # server's limit on new tokens (ModelInfo.max_new_tokens: 0 where it cannot)
        self.cannot_generate = generator_problem(engine)
        self.max_new_tokens = 0 if self.cannot_generate else max_new_tokens
        # Output sizes (0: unbounded): a request whose output cannot fit is refused here.
        self.limits = OutputLimits(
            engine,
            max_example_bytes=max_example_bytes,
            max_buffered_bytes=max_buffered_bytes,
            max_result_bytes=max_result_bytes,
        )

    def parse(self, request: pb.CaptureRequest) -> ParsedRequest:
        """Validate `request` and tokenise its texts.

        Raises:
          RequestError: INVALID_ARGUMENT naming the bad field, or RESOURCE_EXHAUSTED
            for a request over max_texts or max_tokens.
        """
        n = len(request.texts)
        if n == 0:
            raise RequestError(
                INVALID, f"texts is empty: send 1 to {self.max_texts} texts", "texts"
            )
        if n > self.max_texts:
            raise RequestError(
                EXHAUSTED,
                f"texts has {n} entries; this server accepts at most "
                f"{self.max_texts} per request (ModelInfo.max_texts)",
                "texts",
                "max_texts",
            )
        dtype = _enum(request.dtype, codecs.PB_TO_DTYPE, pb.Dtype, "dtype")
        precision = _enum(request.precision, codecs.PB_TO_PRECISION, pb.Precision, "precision")
        codec = _enum(request.codec, codecs.PB_TO_CODEC, pb.Codec, "codec")
        max_chunk_bytes = _chunk_bytes(request.max_chunk_bytes)
        info = self.engine.info
        config = getattr(self.engine, "config", None)  # a test's fake engine has none
        refused = config.refused_quantities(dtype) if config is not None else None
        what = _what(request.what, info.quantities or QUANTITIES, refused)
        layers = _indices(request.layers, info.layers, "layers")
        heads = _indices(request.heads, info.heads, "heads")
        longest = info.max_positions
        rows = _positions(request.query_positions, "query_positions", what, longest)
        keys = _positions(request.key_positions, "key_positions", what, longest)
        try:
            spec = self.engine.make_spec(
                what=what,
                layers=layers,
                heads=heads,
                dtype=dtype,
                precision=precision,  # None: the engine's default
                query_positions=rows,
                key_positions=keys,
            )
        except ValueError as e:  # what, layers and heads passed: a dtype/quantity combination
            raise RequestError(INVALID, str(e), "dtype") from e
        texts = [
            (t.text, t.text_pair) if t.HasField("text_pair") else t.text for t in request.texts
        ]
        if request.ignore_eos and not request.generate:
            raise RequestError(
                INVALID, "ignore_eos applies to generate: set generate too", "ignore_eos"
            )
        too_long = "truncate" if request.truncate else "error"
        generation = shortest = None
        try:
            if request.generate:
                new = self._new_tokens(request.generate)
                prompts, tokenized = self.engine.plan_generation(texts, new, too_long)
                generation = GenerationAsk(tuple(prompts), new, not request.ignore_eos)
                # its fewest tokens: one new token unless it runs to the end (ignore_eos)
                fewest = new if request.ignore_eos else 1
                shortest = [
                    min(p.length + fewest, w.length)
                    for p, w in zip(prompts, tokenized, strict=True)
                ]
            else:
                tokenized = self.engine.tokenize(texts, too_long=too_long)
        except GenerationTooLongError as e:
            raise _too_long_to_generate(e) from e
        except TooLongError as e:
            raise _too_long(e) from e
        except ValueError as e:  # a bad text (an empty prompt to continue: its index)
            index = getattr(e, "index", None)
            raise RequestError(
                INVALID, str(e), "texts" if index is None else f"texts[{index}]"
            ) from e
        _fits(rows, "query_positions", tokenized, shortest)
        _fits(keys, "key_positions", tokenized, shortest)
        parsed = ParsedRequest(
            spec,
            tokenized,
            codec,
            max_chunk_bytes,
            request.coalesce,
            request.weights_in_header,
            generation,
        )
        if parsed.tokens > self.max_tokens:
            raise RequestError(
                EXHAUSTED,
                f"texts hold {parsed.tokens} tokens; this server accepts"
                f" at most {self.max_tokens} per request (ModelInfo.max_tokens)",
                "texts",
                "max_tokens",
            )
        refused = self.limits.check(spec, tokenized)
        if refused is not None:
            raise RequestError(EXHAUSTED, *refused)
        return parsed

    def _new_tokens(self, new: int) -> int:
        """CaptureRequest.generate, checked: this model generates, within the limit."""
        if self.cannot_generate:
            raise RequestError(INVALID, f"generate {new}: {self.cannot_generate}", "generate")
        if new > self.max_new_tokens:
            raise RequestError(
                EXHAUSTED,
                f"generate asks for {new} new tokens; this server generates at most "
                f"{self.max_new_tokens} per request (ModelInfo.max_new_tokens)",
                "generate",
                "max_new_tokens",
            )
        return new
