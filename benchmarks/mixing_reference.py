"""jaxattn's mixing ratios against the authors' definition on held-out text.

Kobayashi et al. 2021's context-mixing ratio, per layer, over EWT sentences:
a float64 eager-torch reference that materialises every contribution vector
v_ij and applies the authors' formula (tests/kobayashi_reference.py, written
from their ``BertNormOutput``), against `jaxattn.analysis.MixingRatios` on the
engine's float32 captures. Also prints the ratio of summed per-pair norms
(jaxattn 0.2's number), to show what changed.

    .venv/bin/python benchmarks/mixing_reference.py [--sentences 60] [--skip 0]

Post-LN BERT-family checkpoints only (the torch side reads BERT's modules);
the default is the embedded all-MiniLM-L6-v2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

EWT = Path(__file__).resolve().parents[2] / "shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"


def torch_ratios(model, tok, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(authors' r [L, T, 3], ratio of summed per-pair norms [L, T, 3]) in float64."""
    import torch
    from kobayashi_reference import authors_mixing

    from jaxattn.analysis import mixing_ratio_rows

    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
        authors, pairs = [], []
        for layer, lay in enumerate(model.encoder.layer):
            x = out.hidden_states[layer][0]  # [S, D]
            alpha = out.attentions[layer][0]  # [H, T, S]
            heads, t = alpha.shape[0], alpha.shape[1]
            v = lay.attention.self.value(x).view(t, heads, -1)  # [S, H, K]
            dense, ln = lay.attention.output.dense, lay.attention.output.LayerNorm
            w_o = dense.weight.T.reshape(heads, -1, x.shape[1])  # [H, K, D]
            f = torch.einsum("shk,hkd->hsd", v, w_o)
            attn = torch.einsum("hts,hsd->tsd", alpha, f)
            res = attn + torch.eye(t, dtype=x.dtype)[:, :, None] * x[None]
            y = res.sum(1) + dense.bias
            std = torch.sqrt(y.var(-1, unbiased=False) + ln.eps)
            res_ln = ln.weight * (res - res.mean(-1, keepdim=True)) / std[:, None, None]
            vectors = [a.numpy() for a in (attn, res, res_ln)]
            authors.append(authors_mixing(vectors)["mixing_ratio"])
            pairs.append(
                np.stack([mixing_ratio_rows(np.linalg.norm(a, axis=-1)) for a in vectors], -1)
            )
    return np.stack(authors), np.stack(pairs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="a local BERT-family checkpoint (default: MiniLM)")
    p.add_argument("--conllu", default=str(EWT))
    p.add_argument("--sentences", type=int, default=60)
    p.add_argument("--skip", type=int, default=0, help="start after this many sentences")
    args = p.parse_args(argv)

    from transformers import AutoModel, AutoTokenizer

    import jaxattn
    from jaxattn.analysis import MixingRatios
    from jaxattn.checkpoints.loading import default_model_dir
    from jaxattn.inputs.conllu import read_conllu
    from jaxattn.quantities import NORM_MEASURES

    path = args.model or str(default_model_dir())
    model = AutoModel.from_pretrained(path, attn_implementation="eager").double().eval()
    tok = AutoTokenizer.from_pretrained(path)
    engine = jaxattn.load(args.model)
    sentences = list(read_conllu(args.conllu))[args.skip : args.skip + args.sentences]
    texts = [" ".join(s.words) for s in sentences]
    caps = engine.capture(texts, what=("attention", "mixing_ratio"))
    mix = MixingRatios()
    sums = {"authors": 0.0, "pairs": 0.0}
    tokens, worst = 0, 0.0
    for text, cap in zip(texts, caps, strict=True):
        mix.update(cap)
        authors, pairs = torch_ratios(model, tok, text)
        worst = max(worst, float(np.abs(cap.mixing_ratio - authors).max()))
        sums["authors"] = sums["authors"] + authors.sum(1)
        sums["pairs"] = sums["pairs"] + pairs.sum(1)
        tokens += cap.length
    got = mix.result()
    print(
        f"{len(texts)} sentences from {args.skip}, {tokens} tokens; largest |jaxattn - "
        f"authors| per token: {worst:.2e}"
    )
    print("measure      layer: authors (float64 torch) / jaxattn / sum of pair norms (0.2)")
    for k, m in enumerate(NORM_MEASURES):
        cells = [
            f"{100 * sums['authors'][i, k] / tokens:.1f}/{100 * got[m][i]:.1f}/"
            f"{100 * sums['pairs'][i, k] / tokens:.1f}"
            for i in range(len(got[m]))
        ]
        print(f"{m:12s} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
