"""`jaxattn dump INPUT --generate N [--ignore-eos]`: the flags reach the store (its
metadata and each example's `generated_start`, as the engine generates them), and
--ignore-eos alone is one line, exit 2, before anything is written. (The dump itself:
tests/dump/test_dump_generate.py.)"""

from __future__ import annotations

from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402

import jaxattn
from jaxattn.cli import main

PROMPTS = ["The quick brown fox", "Hello, world.", "a"]


def test_dump_generates_and_refuses_ignore_eos_alone(tmp_path, capsys):
    model = make_gpt2_checkpoint(tmp_path / "gpt2")
    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    out = tmp_path / "c.zarr"
    args = ["dump", str(corpus), "--model", str(model), "--what", "attention", "--quiet"]
    assert main([*args, "--generate", "3", "--ignore-eos", "--out", str(out)]) == 0
    opened = jaxattn.open_store(out)
    assert opened.metadata["generate"] == {"max_new_tokens": 3, "stop_at_eos": False}
    gens = jaxattn.load(model).generate(PROMPTS, 3, stop_at_eos=False)
    assert [c.generated_start for c in opened] == [g.prompt.length for g in gens]
    assert [c.tokens for c in opened] == [g.prompt.tokens + g.tokens for g in gens]
    capsys.readouterr()
    assert main([*args, "--ignore-eos", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "jaxattn dump: error: --ignore-eos applies to --generate N" in err
    assert "Traceback" not in err and not (tmp_path / "x").exists()
