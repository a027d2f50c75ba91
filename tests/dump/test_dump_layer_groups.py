"""`jaxattn dump` of examples the engine runs in layer groups (issue 31): each group's
`CapturePart` is written to the store as it lands, the parts of an example one after
another in its arrays, and the store holds what the one-program reference dump holds
(within float32 rounding: the groups' programs fuse differently). The tiny BERT's
`WHAT` of one text padded to 8 tokens is 4,512 bytes; a 3,000-byte output budget runs
every example a layer at a time."""

from __future__ import annotations

from dump_helpers import CORPUS, WHAT, assert_same_store, options, texts_of

import jaxattn
from jaxattn.capture.part import CapturePart
from jaxattn.dump import run_dump
from jaxattn.store.writer import ShardWriter


def test_a_dump_writes_each_layer_group_as_it_lands(
    bert_checkpoint, corpus, reference_store, tmp_path, monkeypatch
):
    engine = jaxattn.load(bert_checkpoint, output_budget=3000)
    spec = engine.make_spec(what=WHAT)
    assert engine.pipeline.group_sizes(engine.tokenize(texts_of(CORPUS)), spec) == [1] * 8
    written = []
    add = ShardWriter.add

    def recording(self, cap, **kw):
        written.append((kw["record"], cap.part if isinstance(cap, CapturePart) else None))
        return add(self, cap, **kw)

    monkeypatch.setattr(ShardWriter, "add", recording)
    out = tmp_path / "store.zarr"
    run_dump(engine, options(corpus, out), model_dir=bert_checkpoint)
    # 3 layers, a group each: every record's parts 0, 1, 2 in a row
    assert sorted(written) == [(r, k) for r in range(8) for k in range(3)]
    for i in range(0, len(written), 3):
        assert [k for _, k in written[i : i + 3]] == [0, 1, 2]
    store = jaxattn.open_store(out)
    assert store.complete
    assert_same_store(store, jaxattn.open_store(reference_store), exact=False)
