"""jaxattn.analysis runs where only numpy is installed: it never imports jax, flax or torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys

    BLOCKED = ("jax", "jaxlib", "flax", "torch", "transformers", "tensorflow")

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked import of {name}")
            return None

    sys.meta_path.insert(0, Block())
    import numpy as np
    import jaxattn.analysis as analysis
    from jaxattn.capture import Capture

    tokens = ("[CLS]", "a", "b", ".", "[SEP]")
    att = np.full((1, 1, 5, 5), 0.2, np.float32)
    cap = Capture(tokens=tokens, sentence_b_start=None, layers=(0,), heads=(0,),
                  dtype="float32", tensors={"attention": att})
    corpus = analysis.CorpusAnalysis()
    corpus.update(cap)
    corpus.report()
    analysis.rollout(cap)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    print("ok")
    """
)


def test_analysis_imports_no_jax_flax_torch():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
