"""The capture benchmark runs end to end (no timing asserted: figures go to BENCHMARKS.md)."""

from __future__ import annotations

from jaxattn.bench import capture as bench

CONLLU = "".join(
    f"# text = {t}\n1\t{t.split()[0]}\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    for t in ("i went to the store .", "the store", "at")
)


def test_bench_runs_every_case_on_a_tiny_model(bert_checkpoint, tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU)
    res = bench.run(path, n=2, repeats=1, model=str(bert_checkpoint))
    assert res["n"] == 2
    for case in ("a_transformers", "b_forward", "c_attention", "d_full", "e_attention_uint8"):
        assert res[case] > 0 and len(res[f"{case}_rounds_s"]) == 1
    # The bytes the copy moved: padded blocks, uint8 a quarter of float32.
    assert res["e_attention_uint8_bytes"] * 4 == res["c_attention_bytes"] > 0
    assert res["d_full_bytes"] > res["c_attention_bytes"] and res["copy_gb_s"] > 0
    text = bench.format_result(res)
    assert "(c) speed-up over (a)" in text and "GB/s to the host" in text
    assert "copy of the same bytes as (d)" in text
