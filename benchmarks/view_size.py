"""Size and opening time of the HTML views (issue 15): small files.

    python benchmarks/view_size.py                 # the embedded all-MiniLM-L6-v2
    python benchmarks/view_size.py --no-browser    # sizes only

Two pages with every view (head, model, neuron, stats; attention, alpha_fx_norm,
queries, keys captured), written with `jaxattn.views.write_html` (embed "auto"):

- "20 short": the first 20 sentences of 6-12 words of `jaxattn.inputs.SAMPLE_CORPUS`
  (UD English EWT dev); target <= 2 MB.
- "512 tokens": one example of 512 tokens (EWT sentences joined, truncated);
  target <= 8 MB.

For each: the file size, what the embedded data holds (raw bytes of the arrays
before compression) and, in headless Chromium (`jaxattn.views.find_chromium`),
the first contentful paint and the time until the first view is drawn
(``#jaxattn[data-state=ready]``), from the start of navigation; target <= 2 s.
The median of --repeat fresh page loads is printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

WHAT = ("attention", "alpha_fx_norm", "queries", "keys")
READY = '#jaxattn[data-state="ready"]'


def short_sentences(n: int) -> list[str]:
    """The first `n` corpus sentences of 6 to 12 words."""
    from jaxattn.bench import read_sentences
    from jaxattn.inputs import SAMPLE_CORPUS

    texts = [t for t in read_sentences(SAMPLE_CORPUS, 2000, singles=True)]
    return [t for t in texts if 6 <= len(t.split()) <= 12][:n]


def long_text(words: int = 600) -> str:
    """Corpus sentences joined until over `words` words (over 512 tokens for MiniLM)."""
    from jaxattn.bench import read_sentences
    from jaxattn.inputs import SAMPLE_CORPUS

    out: list[str] = []
    for t in read_sentences(SAMPLE_CORPUS, 500, singles=True):
        out.append(t)
        if sum(len(s.split()) for s in out) > words:
            break
    return " ".join(out)


def open_times(path: Path, repeat: int) -> tuple[float, float]:
    """Median (first contentful paint, first view drawn) in seconds over `repeat` loads."""
    from playwright.sync_api import sync_playwright

    from jaxattn.views import find_chromium

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    fcp, ready = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=args)
        for _ in range(repeat):
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.goto(path.as_uri(), wait_until="commit")
            page.wait_for_selector(READY, timeout=60_000)
            ready.append(page.evaluate("performance.now()") / 1000)
            paint = page.evaluate(
                "performance.getEntriesByName('first-contentful-paint').map(e => e.startTime)"
            )
            fcp.append(paint[0] / 1000 if paint else float("nan"))
            context.close()
        browser.close()
    return statistics.median(fcp), statistics.median(ready)


def data_bytes(caps) -> str:
    """What the captures hold, float32 bytes per quantity, summed over examples."""
    parts = []
    for q in WHAT:
        n = sum(c.array(q).size for c in caps) * 4
        parts.append(f"{q} {n / 1e6:.2f} MB")
    return "float32 data: " + ", ".join(parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=20, help="short sentences (default 20)")
    p.add_argument("--repeat", type=int, default=3, help="page loads per file (median)")
    p.add_argument("--no-browser", action="store_true", help="sizes only")
    p.add_argument("--keep", type=Path, help="write the pages into this folder")
    args = p.parse_args()

    import jaxattn
    from jaxattn.views import write_html

    engine = jaxattn.load()
    cases = [
        (f"{args.n} short", short_sentences(args.n), 2e6),
        ("512 tokens", [long_text()], 8e6),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name, texts, target in cases:
            caps = engine.capture(texts, what=WHAT, too_long="truncate")
            lengths = [len(c.tokens) for c in caps]
            path = folder / f"{name.replace(' ', '_')}.html"
            t0 = time.perf_counter()
            write_html(path, caps)
            built = time.perf_counter() - t0
            size = path.stat().st_size
            ok = "ok" if size <= target else "OVER"
            print(
                f"{name}: {len(caps)} example(s), {min(lengths)}-{max(lengths)} tokens, "
                f"{engine.info.name}; {data_bytes(caps)}"
            )
            print(
                f"  file {size / 1e6:.2f} MB (target {target / 1e6:.0f} MB: {ok}), "
                f"written in {built:.2f} s"
            )
            if not args.no_browser:
                fcp, ready = open_times(path, args.repeat)
                ok = "ok" if ready <= 2.0 else "OVER"
                print(
                    f"  chromium: first contentful paint {fcp:.2f} s, first view drawn "
                    f"{ready:.2f} s (target 2 s: {ok}; median of {args.repeat})"
                )


if __name__ == "__main__":
    main()
