"""`jaxattn analyze INPUT --out report.json`: the attention-paper analyses over a corpus.

INPUT is a text file (one example per line; a tab separates the two sentences of
a pair) or a CoNLL-U file (each sentence captured as its words joined by single
spaces, so its pieces align to the words; its parses give the dependency-head
table). Captures come from a local engine, or from a server with --server, in
chunks, and stream through `jaxattn.analysis.CorpusAnalysis`: memory stays
bounded whatever the corpus size.
"""

from __future__ import annotations

import itertools
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from jaxattn.cli.serve_cmd import read_token


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="head statistics, patterns, dependency heads and rollout over a corpus",
        description="Analyse the attention of every example of INPUT (Clark et al. 2019, "
        "Kovaleva et al. 2019, Vig 2019, Abnar & Zuidema 2020) and write report.json "
        "with a Markdown summary (report.md) beside it.",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="text file (one example per line, tab-separated pairs) or CoNLL-U file",
    )
    p.add_argument("--out", metavar="FILE", required=True, help="report.json to write")
    p.add_argument(
        "--conllu",
        metavar="FILE",
        help="parsed corpus for the dependency heads (default: INPUT if CoNLL-U)",
    )
    p.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="capture through this server (comma-separated: round-robin)",
    )
    p.add_argument(
        "--model",
        metavar="PATH",
        help="local checkpoint when no --server (default: embedded model)",
    )
    p.add_argument(
        "--chunk",
        type=int,
        default=256,
        metavar="N",
        help="examples captured per call (bounds memory; default 256)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="analyse only the first N examples")
    p.add_argument(
        "--dtype", default="float32", choices=("float32", "float16", "bfloat16", "uint8")
    )
    p.add_argument(
        "--codec",
        default="zstd",
        choices=("none", "zstd", "lz4"),
        help="wire compression with --server (default zstd)",
    )
    p.add_argument(
        "--no-norm",
        action="store_true",
        help="attention weights only (skip alpha_fx_norm, the norm-based weights)",
    )
    p.add_argument(
        "--ablate",
        choices=("zero", "uniform"),
        help="also ablate each head alone (Kovaleva et al. 2019) and report the change of "
        "the final [CLS]/mean-pooled vectors and masked-LM loss (local engine only)",
    )
    p.add_argument(
        "--ablate-examples",
        type=int,
        default=200,
        metavar="N",
        help="examples used by --ablate (each head reruns them; default 200)",
    )
    p.add_argument(
        "--no-head-distance",
        action="store_true",
        help="skip the Jensen-Shannon distances between heads (O(heads^2 T^2))",
    )
    p.add_argument(
        "--coarse-relations",
        action="store_true",
        help="group dependency relations by universal label (nmod:poss -> nmod)",
    )
    p.add_argument(
        "--token-file", metavar="FILE", help="bearer token for --server (or $JAXATTN_TOKEN)"
    )
    p.add_argument("--tls-ca", metavar="PEM", help="connect with TLS trusting this CA")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per chunk (with --server)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def is_conllu(path: Path) -> bool:
    """A .conllu suffix, or a first token line of 10 tab-separated columns with an integer ID."""
    if path.suffix.lower() == ".conllu":
        return True
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                cols = line.rstrip("\n").split("\t")
                return len(cols) == 10 and cols[0].split("-")[0].isdigit()
    return False


def read_texts(path: Path) -> list:
    """Examples of a text file: one per non-empty line; a tab separates a pair's sentences.

    Raises:
      ValueError: a line with more than one tab (named by line number).
    """
    out = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) > 2:
                raise ValueError(f"{path}:{number}: more than one tab (a pair is 'A<TAB>B')")
            out.append(parts[0] if len(parts) == 1 else (parts[0], parts[1]))
    return out


class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, every 10% otherwise)."""

    def __init__(self, total: int, label: str, enabled: bool = True):
        self.total, self.label, self.done = max(total, 1), label, 0
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()
        self._shown = -1

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        frac = min(self.done / self.total, 1.0)
        if not self.tty and int(frac * 10) == self._shown:
            return
        self._shown = int(frac * 10)
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        bar = "#" * int(frac * 30)
        line = (
            f"{self.label} {self.done}/{self.total} [{bar:<30}] {100 * frac:3.0f}% "
            f"{rate:.1f}/s eta {eta:.0f}s"
        )
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


class _Source:
    """Captures of texts, in input order, in chunks: a local engine or a server."""

    def __init__(self, args, what: tuple[str, ...]):
        self.args, self.what = args, what
        if args.server:
            from jaxattn.client import AttentionClient

            self.client = AttentionClient(
                args.server.split(","),
                token=read_token(args.token_file),
                root_certificates=args.tls_ca,
                timeout=args.timeout,
            )
            self.model = self.client.model_info().name
            self.where = f"server {args.server}"
        else:
            import jaxattn

            self.client = None
            self.engine = jaxattn.load(args.model)
            self.model = self.engine.info.name
            self.where = "local engine"

    def captures(self, texts: list) -> Iterator:
        kw = dict(what=self.what, dtype=self.args.dtype, truncate=True)
        for start in range(0, len(texts), self.args.chunk):
            chunk = texts[start : start + self.args.chunk]
            if self.client is not None:
                from jaxattn.client import AttentionServiceError

                try:
                    yield from self.client.stream(chunk, codec=self.args.codec, **kw)
                except AttentionServiceError as e:
                    raise ValueError(f"the server at {self.args.server} answered {e}") from None
            else:
                yield from self.engine.capture(chunk, **kw)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _cpus() -> int:
    # the CPUs this process may use (a container's share), not the host's count
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _run(args) -> int:
    from jaxattn.analysis import CorpusAnalysis, read_conllu, write_report
    from jaxattn.analysis.mixing import QUANTITIES as MIXING_QUANTITIES

    t0 = time.monotonic()
    path = Path(args.input)
    if not path.is_file():
        raise FileNotFoundError(f"no input file {path}")
    if args.chunk < 1:
        raise ValueError("--chunk must be at least 1")
    parsed_input = is_conllu(path)
    if parsed_input:
        sentences = list(itertools.islice(read_conllu(path), args.limit))
        texts: list = [" ".join(s.words) for s in sentences]
    else:
        sentences = []
        texts = read_texts(path)[: args.limit]
    extra = []
    if args.conllu and not (parsed_input and Path(args.conllu).resolve() == path.resolve()):
        extra = list(itertools.islice(read_conllu(args.conllu), args.limit))
    if not texts:
        raise ValueError(f"{path} has no examples")
    if args.ablate and args.server:
        raise ValueError("--ablate runs the model with heads disabled: use a local engine, "
                         "not --server")  # fmt: skip
    what = ("attention",) if args.no_norm else ("attention", "alpha_fx_norm", *MIXING_QUANTITIES)
    source = _Source(args, what)
    corpus = CorpusAnalysis(
        head_distance=not args.no_head_distance, coarse_relations=args.coarse_relations
    )
    quiet = args.quiet or len(texts) + len(extra) < 50
    try:
        bar = Progress(len(texts), "analyze", not quiet)
        for i, cap in enumerate(source.captures(texts)):
            corpus.update(cap, sentences[i] if parsed_input else None)
            bar.update()
        bar.close()
        if extra:
            bar = Progress(len(extra), "parses", not quiet)
            extra_texts = [" ".join(s.words) for s in extra]
            for cap, sent in zip(source.captures(extra_texts), extra, strict=True):
                corpus.add_parse(cap, sent)
                bar.update()
            bar.close()
        ablation = None
        if args.ablate:
            from jaxattn.ablation import head_ablation_study

            ablation = head_ablation_study(
                source.engine, texts[: args.ablate_examples], mode=args.ablate
            )
    finally:
        source.close()
    seconds = time.monotonic() - t0
    meta = {
        "model": source.model,
        "input": str(path),
        "conllu": args.conllu or (str(path) if parsed_input else None),
        "captured_by": source.where,
        "what": list(what),
        "dtype": args.dtype,
        "seconds": round(seconds, 1),
        "machine": f"{platform.machine()}, {_cpus()} CPUs, {platform.system()}",
    }
    report = corpus.report(meta=meta)
    if ablation is not None:
        report["head_ablation"] = ablation
    json_path, md_path = write_report(report, args.out)
    print(f"analysed {corpus.examples} examples in {seconds:.1f}s: wrote {json_path} and {md_path}")
    return 0
