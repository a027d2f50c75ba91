"""The load test's request mix, its right answers, and the driver `jaxattn loadtest` runs.

The mix: single sentences, sentence pairs, "rich" single-sentence captures
(four quantities, a layer and head subset), batches of 50 sentences and long
~500-token texts, over every dtype x codec. Answers are checked against an
in-process engine of the same model (`jaxattn.bench.expect`); the load itself
is `jaxattn.bench.load_generator.run_load`.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from jaxattn.bench.expect import batch_sizes, build_expectations
from jaxattn.bench.load_generator import LoadRequest, listening_pid, run_load
from jaxattn.bench.sentences import DEFAULT_CONLLU, read_sentences
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.wire.codecs import CODECS

DTYPES = tuple(OUTPUT_DTYPES)
RICH = ("attention", "alpha_fx_norm", "sum_alpha_fx_norm", "hidden_states")
# Share of requests per kind (the rest of the mix is spread evenly within a kind).
WEIGHTS = {"single": 0.55, "pair": 0.33, "rich": 0.06, "batch50": 0.045, "long": 0.015}
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


def sentences(engine, conllu: Path, lo: int = 9, hi: int = 16) -> list[str]:
    """Sentences of `lo`..`hi` tokens (one length bucket: few compiled shapes)."""
    pool = list(FALLBACK)
    if conllu.is_file():  # single sentences: pairs are made from them below
        pool = read_sentences(conllu, singles=True)
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


def build_mix(engine, pool: list[str]):
    """The LoadRequests of the mix: every kind over every dtype x codec."""
    if len(pool) < 8:
        raise ValueError(f"only {len(pool)} usable sentences; give --conllu with more")
    combos = list(itertools.product(DTYPES, CODECS))
    pairs = [
        (a, b)
        for a, b in zip(pool[::2], pool[1::2], strict=False)
        if 25 <= engine.tokenize([(a, b)])[0].length <= 32
    ][:24]
    singles = pool[:24]
    batches = [tuple(pool[(k * 50 + i) % len(pool)] for i in range(50)) for k in range(4)]
    longs = long_texts(engine, pool, 3)
    kinds = {
        "single": [(t,) for t in singles],
        "pair": [(p,) for p in pairs],
        "rich": [(t,) for t in singles[:6]],
        "batch50": batches,
        "long": [(t,) for t in longs],
    }
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
                    (0, 5) if rich else None,
                    (1, 11) if rich else None,
                    dtype,
                    codec,
                    WEIGHTS[kind] / n,
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
    server: str,
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

    Returns:
      (LoadResult, the mix, its expectations): see `jaxattn.bench.load_generator.run_load`.
    """
    import jaxattn
    from jaxattn.client import AttentionClient

    if requests is None and duration is None:
        raise ValueError("give --requests N, --duration S or both: a load test must be bounded")
    engine = jaxattn.load(model)
    mix = build_mix(engine, sentences(engine, conllu))
    log(
        f"mix: {len(mix)} request kinds over {sum(len(r.texts) for r in mix)} texts; "
        "computing the reference captures"
    )
    expectations = build_expectations(engine, mix)
    options = dict(token=token, timeout=600.0)
    pid = server_pid or listening_pid(int(server.rsplit(":", 1)[1]))
    log(f"server pid {pid}; compiling every batch shape on the server")
    with AttentionClient(server, **options) as client:
        client.wait_ready(60)
        log(f"{warm_shapes(client, engine, mix)} shape warm-up requests sent")
    if warmup:
        warm = run_load(
            server,
            mix,
            expectations,
            clients=clients,
            max_requests=warmup,
            client_options=options,
            seed=seed + 1,
        )
        log(f"warm-up: {warm.requests} requests, {len(warm.wrong)} wrong, {dict(warm.errors)}")

    def progress(r) -> None:
        rss = f"{r.rss[-1][1] // 1024} MiB" if r.rss else "?"
        log(
            f"{r.requests} requests, {r.ok} ok, {len(r.wrong)} wrong, errors {dict(r.errors)}, "
            f"server rss {rss}"
        )

    result = run_load(
        server,
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
