"""Generation stops where transformers' generate stops: at the checkpoint's generation
config EOS ids (generation_config.json's eos_token_id, an id or a list; else config.json's;
else the tokenizer's), kept by `jaxattn convert`; a malformed one is a CheckpointError.

The EOS ids are tokens the tiny Llama really generates: its free (EOS-less) greedy
continuations are computed first, and two of their tokens made the EOS list.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from generate_support import torch_generate
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.checkpoints import convert_checkpoint
from jaxattn.checkpoints.eos import read_eos_ids
from jaxattn.errors import CheckpointError

PROMPTS = ["The quick brown fox", "Hello, world. Hello,", "a"]
NEW = 7


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(the tiny Llama's directory, its tokenizer's EOS id, each prompt's prompt ids and
    free continuation, the two EOS ids chosen from those continuations)."""
    path = make_llama_checkpoint(tmp_path_factory.mktemp("llama"))
    engine = jaxattn.load(path, buckets=(32,))
    tokenizer_eos = engine.tokenizer.hf.eos_token_id
    free = engine.generate(PROMPTS, NEW, stop_at_eos=False)
    runs = [(g.prompt.ids, g.ids) for g in free]
    # the 4th token of the first continuation, the 2nd of the second: each prompt stops
    # at a different member of the list (and the third, maybe, at neither)
    eos = (runs[0][1][3], runs[1][1][1])
    assert tokenizer_eos not in eos and eos[0] != eos[1]
    assert all(tokenizer_eos not in ids for _, ids in runs)  # the free runs never met it
    return path, tokenizer_eos, runs, eos


def _variant(base_dir: Path, out: Path, *, generation=..., config=...) -> Path:
    """A copy of the checkpoint whose generation_config.json / config.json eos_token_id is
    `generation` / `config` (...: unchanged; None: the field removed; "absent": the
    generation_config.json file removed)."""
    shutil.copytree(base_dir, out)
    for name, value in (("generation_config.json", generation), ("config.json", config)):
        file = out / name
        if value == "absent":
            file.unlink()
        elif value is not ...:
            doc = json.loads(file.read_text())
            doc.pop("eos_token_id", None)
            if value is not None:
                doc["eos_token_id"] = value
            file.write_text(json.dumps(doc))
    return out


def _cut(ids, eos) -> tuple[tuple[int, ...], str]:
    """A free continuation cut after its first EOS (hand-computed stop)."""
    for i, t in enumerate(ids):
        if t in eos:
            return tuple(ids[: i + 1]), "eos"
    return tuple(ids), "max_new_tokens"


def _check_stops(path: Path, runs, eos) -> None:
    """jaxattn's continuations of `path` are the free ones cut at `eos`, and transformers'
    generate (its own reading of the checkpoint's EOS ids) gives the same ids."""
    from transformers import AutoModelForCausalLM

    engine = jaxattn.load(path, buckets=(32,))
    assert engine.eos_ids == eos
    gens = engine.generate(PROMPTS, NEW)
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    stops = set()
    for g, (prompt_ids, free) in zip(gens, runs, strict=True):
        want, stop = _cut(free, eos)
        assert (g.ids, g.stop) == (want, stop)
        assert list(g.ids) == torch_generate(torch_model, list(prompt_ids), NEW)
        stops.add(g.ids[-1] if stop == "eos" else None)
    assert set(eos) <= stops  # each member of the list ended a continuation


def test_a_generation_config_list_stops_where_transformers_stops(base, tmp_path):
    path, _, runs, eos = base
    _check_stops(_variant(path, tmp_path / "g", generation=list(eos)), runs, eos)


def test_a_config_json_list_stops_where_transformers_stops(base, tmp_path):
    path, _, runs, eos = base
    gen = _variant(path, tmp_path / "c", generation="absent", config=list(eos))
    _check_stops(gen, runs, eos)


def test_the_precedence_generation_config_then_config_json_then_the_tokenizer(base, tmp_path):
    path, tokenizer_eos, _, (a, b) = base
    both = _variant(path, tmp_path / "both", generation=a, config=[b])
    assert read_eos_ids(both) == (a,)
    # a generation config naming none (or null): config.json's (module docstring)
    unnamed = _variant(path, tmp_path / "unnamed", generation=None, config=[b, a, b])
    assert read_eos_ids(unnamed) == (b, a)
    neither = _variant(path, tmp_path / "neither", generation="absent", config=None)
    assert read_eos_ids(neither) is None
    engine = jaxattn.load(neither, buckets=(32,))
    assert engine.eos_ids == (tokenizer_eos,) == (1,)  # the fixture's "</s>"
    assert engine.generate(PROMPTS[:1], 2, stop_at_eos=True)[0].stop == "max_new_tokens"


def test_a_converted_checkpoint_keeps_the_eos_ids(base, tmp_path):
    path, tokenizer_eos, runs, eos = base
    out = convert_checkpoint(_variant(path, tmp_path / "g", generation=list(eos)), tmp_path / "o")
    assert json.loads((out / "jaxattn.json").read_text())["eos_token_id"] == list(eos)
    engine = jaxattn.load(out, buckets=(32,))
    assert engine.eos_ids == eos
    gens = engine.generate(PROMPTS, NEW)
    assert [(g.ids, g.stop) for g in gens] == [_cut(free, eos) for _, free in runs]
    # a checkpoint naming none converts to one naming none: the tokenizer's
    neither = _variant(path, tmp_path / "n", generation="absent", config=None)
    out = convert_checkpoint(neither, tmp_path / "on")
    assert "eos_token_id" not in json.loads((out / "jaxattn.json").read_text())
    assert read_eos_ids(out) is None


BAD = [
    ("generation_config.json", "{not json", "not valid JSON"),
    ("generation_config.json", "[1, 2]", "not a JSON object"),
    ("generation_config.json", '{"eos_token_id": "7"}', 'a string "7"'),
    ("generation_config.json", '{"eos_token_id": [1, "x"]}', "a list [1, 'x']"),
    ("generation_config.json", '{"eos_token_id": true}', "true/false"),
    ("generation_config.json", '{"eos_token_id": []}', "a list []"),
    ("generation_config.json", '{"eos_token_id": -3}', "a number -3"),
    ("generation_config.json", '{"eos_token_id": 2.0}', "a number 2.0"),
]


@pytest.mark.parametrize(("name", "text", "said"), BAD, ids=[t for _, t, _ in BAD])
def test_a_malformed_generation_config_names_the_file_and_field(base, tmp_path, name, text, said):
    path = _variant(base[0], tmp_path / "m")
    (path / name).write_text(text)
    with pytest.raises(CheckpointError) as e:
        read_eos_ids(path)
    message = str(e.value)
    assert str(path / name) in message and said.replace('"7"', "'7'") in message
    if "eos_token_id" in text:
        assert '"eos_token_id" must be a token id' in message


def test_a_malformed_eos_is_refused_by_load_and_convert(base, tmp_path):
    path = _variant(base[0], tmp_path / "m", generation="absent", config="7")
    with pytest.raises(CheckpointError, match=r"config\.json: \"eos_token_id\" must be"):
        jaxattn.load(path, buckets=(32,))
    with pytest.raises(CheckpointError, match=r"config\.json: \"eos_token_id\" must be"):
        convert_checkpoint(path, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_an_encoder_reads_no_generation_config(bert_checkpoint, tmp_path):
    path = shutil.copytree(bert_checkpoint, tmp_path / "bert")
    (path / "generation_config.json").write_text("{not json")  # read by decoders only
    assert jaxattn.load(path, buckets=(32,)).config.causal is False
