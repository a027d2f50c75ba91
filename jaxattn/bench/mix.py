"""The load test's request mix, its right answers, and the driver `jaxattn loadtest` runs.

The mix: single sentences, sentence pairs, "rich" single-sentence captures
(four quantities, a layer and head subset), batches of 50 sentences, long
~500-token texts, texts exactly at the model's limit (`max_length` tokens,
special tokens included), batches of 50 the client cancels after 1, 5, 20 or 45
examples, and singles and long texts sent with a deadline of 0.05, 0.2, 0.5 or
2 s (DEADLINE_EXCEEDED is their designed answer when it passes), all over every
dtype x codec. Answers are checked against an in-process engine of the same
model (`jaxattn.bench.expect`): every answer, every example of it; the load
itself is `jaxattn.bench.load_generator.run_load`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from jaxattn.bench.expect import batch_sizes, build_expectations
from jaxattn.bench.load_generator import LoadRequest, listening_pid, run_load
from jaxattn.bench.sentences import DEFAULT_CONLLU, read_sentences
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import InputError, UsageError
from jaxattn.wire.codecs import CODECS

DTYPES = tuple(OUTPUT_DTYPES)
RICH = ("attention", "alpha_fx_norm", "sum_alpha_fx_norm", "hidden_states")
# Share of requests per kind (the rest of the mix is spread evenly within a kind).
WEIGHTS = {
    "single": 0.52,
    "pair": 0.31,
    "rich": 0.06,
    "batch50": 0.04,
    "long": 0.015,
    "at_limit": 0.01,
    "cancel": 0.025,
    "deadline": 0.02,
}
CANCEL_AFTER = (1, 5, 20, 45)  # examples a "cancel" request reads of its 50
DEADLINES_S = (0.05, 0.2, 0.5, 2.0)  # a "deadline" request's timeout
FALLBACK = (
    "I went to the store.",
    "At the store, I bought fresh strawberries.",
    "The cat sat on the mat and looked at the dog.",
    "We walked home late after the long meeting.",
    "She reads a new book every single week.",
    "They ran to the park before the rain started.",
    "My brother plays the guitar in a small band.",
    "The train to the city was late again today.",
)


def read_pool(conllu: Path) -> list[str]:
    """The single sentences of `conllu` (pairs are made from them), or `FALLBACK` where
    there is no such file.

    Raises:
      InputError: an unreadable file (named, with its line).
    """
    return read_sentences(conllu, singles=True) if conllu.is_file() else list(FALLBACK)


def sentences(engine, conllu: Path, lo: int = 9, hi: int = 16) -> list[str]:
    """Sentences of `lo`..`hi` tokens (one length bucket: few compiled shapes) of
    `conllu` (`read_pool`)."""
    return usable(engine, read_pool(conllu), lo, hi)


def usable(engine, pool: list[str], lo: int = 9, hi: int = 16) -> list[str]:
    """The sentences of `pool` of `lo`..`hi` tokens."""
    lengths = [e.length for e in engine.tokenize(pool, too_long="truncate")]
    return [s for s, n in zip(pool, lengths, strict=True) if lo <= n <= hi]


def long_texts(engine, pool: list[str], n: int, lo: int = 480, hi: int = 510) -> list[str]:
    """`n` texts of `lo`..`hi` tokens, consecutive sentences joined (the limit is 512).

    For a model with a shorter limit the window moves below it (`lo`, `hi` shrink
    by the difference), so the search ends for any model.
    """
    short = max(0, hi + 2 - engine.config.max_length)
    lo, hi = max(1, lo - short), max(1, hi - short)
    out, cur = [], []
    for s in itertools.cycle(pool):
        cur.append(s)
        length = engine.tokenize([" ".join(cur)], too_long="truncate")[0].length
        if length > hi:
            cur = [s]
        elif length >= lo:
            out.append(" ".join(cur))
            cur = []
            if len(out) == n:
                return out


def at_limit_texts(engine, pool: list[str], n: int, verify: int = 40) -> list[str]:
    """Up to `n` texts of exactly `engine.config.max_length` tokens (the longest allowed).

    Runs of consecutive words of the pool whose token counts add up to the limit:
    each word's count comes from one batch tokenisation (a word's tokens do not
    depend on its neighbours in a WordPiece or Unigram tokeniser; the special
    tokens are counted once), and each candidate is then tokenised whole and kept
    only if it is exactly at the limit (at most `verify` candidates are tried:
    a tokeniser where words do depend on their neighbours gives fewer or none).
    """
    limit = engine.config.max_length
    words = [w for s in pool for w in s.split()][:20_000]
    if not words:
        return []
    one, two = (e.length for e in engine.tokenize(["a", "a a"], too_long="truncate"))
    special = 2 * one - two  # "a" is k + special tokens, "a a" 2k + special
    counts = [e.length - special for e in engine.tokenize(words, too_long="truncate")]
    out: list[str] = []
    start, end, total = 0, 0, 0  # words[start:end] have `total` tokens
    while len(out) < n and verify > 0 and start < len(words):
        while end < len(words) and total + special < limit:
            total += counts[end]
            end += 1
        if total + special == limit:
            verify -= 1
            text = " ".join(words[start:end])
            got = engine.tokenize([text], too_long="skip")[0]
            if got is not None and got.length == limit and text not in out:
                out.append(text)
                start, end, total = end, end, 0  # the next one from further on
                continue
        if end >= len(words) and total + special < limit:
            break
        total -= counts[start]
        start += 1
    return out


def build_mix(engine, pool: list[str]):
    """The LoadRequests of the mix: every kind over every dtype x codec."""
    if len(pool) < 8:
        raise InputError(
            None, f"only {len(pool)} usable sentences (the mix needs 8): give --conllu with more"
        )
    combos = list(itertools.product(DTYPES, CODECS))
    causal = engine.config.causal  # a decoder reads no pairs: the two sentences as one text
    joined = [f"{a} {b}" if causal else (a, b) for a, b in zip(pool[::2], pool[1::2], strict=False)]
    lengths = [t and t.length for t in engine.tokenize(joined, too_long="skip")]
    pairs = [p for p, n in zip(joined, lengths, strict=True) if n and 25 <= n <= 32][:24]
    # the rich kind's layer and head subsets: the first and last of each (MiniLM's 0, 5
    # and 1, 11; within any model's, a decoder of 30 layers x 9 heads too)
    last_layer, last_head = engine.config.num_layers - 1, engine.config.num_heads - 1
    rich_layers = tuple(sorted({0, last_layer}))
    rich_heads = tuple(sorted({min(1, last_head), last_head}))
    singles = pool[:24]
    batches = [tuple(pool[(k * 50 + i) % len(pool)] for i in range(50)) for k in range(4)]
    longs = long_texts(engine, pool, 3)
    limits = at_limit_texts(engine, pool, 3)
    kinds = {
        "single": [(t,) for t in singles],
        "pair": [(p,) for p in pairs],
        "rich": [(t,) for t in singles[:6]],
        "batch50": batches,
        "long": [(t,) for t in longs],
        "at_limit": [(t,) for t in limits],
        "cancel": batches,
        "deadline": [(t,) for t in singles[:4] + longs[:2]],
    }
    # a pool of sentences too short to fill the model's limit (at_limit), or none of
    # whose pairs fall in 25..32 tokens (a decoder's tokenizer may cut them finer)
    kinds = {kind: texts for kind, texts in kinds.items() if texts}
    mix = []
    for kind, texts in kinds.items():
        kind_combos = (
            combos if kind != "rich" else [(d, c) for d, c in combos if d in ("float32", "uint8")]
        )
        per = max(1, len(texts) // len(kind_combos))
        n = per * len(kind_combos)
        for j in range(n):
            dtype, codec = kind_combos[j % len(kind_combos)]
            rich = kind == "rich"
            mix.append(
                LoadRequest(
                    kind,
                    tuple(texts[j % len(texts)]),
                    RICH if rich else ("attention",),
                    rich_layers if rich else None,
                    rich_heads if rich else None,
                    dtype,
                    codec,
                    WEIGHTS[kind] / n,
                    cancel_after=CANCEL_AFTER[j % len(CANCEL_AFTER)] if kind == "cancel" else None,
                    timeout=DEADLINES_S[j % len(DEADLINES_S)] if kind == "deadline" else None,
                )
            )
    return mix


def warm_shapes(client, engine, mix) -> int:
    """Compile every (spec, bucket, batch size) the run can hit, one request each."""
    seen, sent = set(), 0
    for r in mix:
        spec = engine.make_spec(r.what, r.layers, r.heads, r.dtype)
        for text in r.texts:
            enc = engine.tokenize([text])[0]
            bucket = next(b for b in engine.buckets if b >= enc.length)
            for size in batch_sizes(engine, spec, bucket):
                if (spec, bucket, size) not in seen:
                    seen.add((spec, bucket, size))
                    client.capture(
                        [text] * size,
                        what=r.what,
                        layers=r.layers,
                        heads=r.heads,
                        dtype=r.dtype,
                        timeout=600,
                    )
                    sent += 1
    return sent


def loadtest(
    server: str | Sequence[str],
    *,
    clients: int = 64,
    requests: int | None = None,
    duration: float | None = None,
    warmup: int = 200,
    model=None,
    conllu: Path = DEFAULT_CONLLU,
    server_pid: int | None = None,
    token: str | None = None,
    seed: int = 0,
    log=print,
):
    """Build the mix, compute its right answers, warm the server up, run the load.

    `server`: an address, or several (replicas: each gets every shape compiled
    in the warm-up; each simulated client then sends to all of them in turn,
    with the client's retry and resume, see `jaxattn.client.AttentionClient`).

    Returns:
      (LoadResult, the mix, its expectations): see `jaxattn.bench.load_generator.run_load`.
    """
    import jaxattn
    from jaxattn.client import AttentionClient

    if requests is None and duration is None:
        raise UsageError("give --requests N, --duration S or both: a load test must be bounded")
    pool = read_pool(conllu)  # a bad input file is named before anything else
    options = dict(token=token, timeout=600.0)
    servers = [server] if isinstance(server, str) else list(server)
    for address in servers:  # before the model and the right answers: fail fast
        log(f"waiting for the server at {address} (up to 60 s)")
        with AttentionClient(address, **options) as client:
            client.wait_ready(60)
    engine = jaxattn.load(model)
    mix = build_mix(engine, usable(engine, pool))
    log(
        f"mix: {len(mix)} request kinds over {sum(len(r.texts) for r in mix)} texts; "
        "computing the reference captures"
    )
    expectations = build_expectations(engine, mix)
    pid = server_pid or listening_pid(int(servers[0].rsplit(":", 1)[1]))
    log(f"server pid {pid}; compiling every batch shape on the server")
    sent = 0
    for address in servers:  # every replica compiles (or loads) every shape
        with AttentionClient(address, **options) as client:
            sent += warm_shapes(client, engine, mix)
    log(f"{sent} shape warm-up requests sent")
    if warmup:
        warm = run_load(
            servers,
            mix,
            expectations,
            clients=clients,
            max_requests=warmup,
            client_options=options,
            seed=seed + 1,
        )
        log(
            f"warm-up: {warm.requests} requests, {len(warm.wrong)} wrong, {len(warm.lost)} lost, "
            f"{dict(warm.errors)}"
        )

    def progress(r) -> None:
        rss = f"{r.rss[-1][1] // 1024} MiB" if r.rss else "?"
        log(
            f"{r.requests} requests, {r.ok} ok, {len(r.wrong)} wrong, errors {dict(r.errors)}, "
            f"server rss {rss}"
        )

    result = run_load(
        servers,
        mix,
        expectations,
        clients=clients,
        max_requests=requests,
        duration=duration,
        server_pid=pid,
        client_options=options,
        seed=seed,
        progress=progress,
    )
    return result, mix, expectations
