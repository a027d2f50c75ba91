"""Regenerate the README's pictures of the views (docs/img/*.png) with the project itself.

    .venv/bin/python docs/make_images.py

Captures Vig's example pair once with the embedded all-MiniLM-L6-v2
(`jaxattn capture ... --out`), then runs one `jaxattn view` per picture; the
commands are printed, and are the ones README.md shows. PNGs come from headless
Chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from pathlib import Path

from jaxattn.cli import main

IMG = Path(__file__).resolve().parent / "img"
PAIR = ("I went to the store.", "At the store, I bought fresh strawberries.")
WHAT = "attention,alpha_fx_norm,queries,keys"
PICTURES = {  # file -> the `jaxattn view` options after the capture file
    "head.png": ["--views", "head", "--layers", "2", "--heads", "0,5,11"],
    "head_norm.png": ["--views", "head", "--layers", "2", "--heads", "0,5,11", "--kind", "norm"],
    "model.png": ["--views", "model"],
    "neuron.png": ["--views", "neuron", "--layers", "2", "--heads", "0", "--token", "5"],
    "stats.png": ["--views", "stats"],
}


def run(args: list[str]) -> None:
    print("jaxattn " + shlex.join(args), flush=True)
    if main(args) != 0:
        sys.exit(f"failed: jaxattn {shlex.join(args)}")


def make() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cap = str(Path(tmp, "pair.npz"))
        run(["capture", *PAIR, "--what", WHAT, "--out", cap])
        for name, options in PICTURES.items():
            run(["view", cap, *options, "--scale", "1", "--out", str(IMG / name), "--overwrite"])


if __name__ == "__main__":
    make()
