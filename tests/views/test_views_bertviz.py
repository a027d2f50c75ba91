"""views.to_bertviz: a Capture as the arguments of BertViz's head_view / model_view.

The BertViz tests run the real package (bertviz==1.4.1, installed --no-deps by
scripts/setup.sh) and read the parameters it embeds in the HTML it returns.
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture
from jaxattn.errors import UsageError
from jaxattn.views import bertviz as adapter
from jaxattn.views import to_bertviz

PARAMS = re.compile(r"const params = (\{.*?\}); // HACK")


def _params(html) -> dict:
    """The params BertViz's page draws from (the JSON it puts into its script)."""
    return json.loads(PARAMS.search(html.data).group(1))


def _norm_capture() -> Capture:
    rng = np.random.default_rng(7)
    norm = (rng.random((2, 3, 5, 5)) * 4).astype(np.float32)
    norm[1, 2, 0] = 0  # an all-zero row stays zero
    norm.setflags(write=False)  # read-only, as decoded from the wire
    return Capture(
        tokens=("[CLS]", "Ġa", "[SEP]", "b", "[SEP]"),
        sentence_b_start=None,
        layers=(0, 9),
        heads=(1, 3, 4),
        dtype="float32",
        tensors={"alpha_fx_norm": norm},
    )


def test_head_view_keeps_real_layer_and_head_numbers():
    bertviz = pytest.importorskip("bertviz")
    cap = make("uint8")  # layers (1, 4), heads (0, 2, 5), a sentence pair
    params = _params(bertviz.head_view(**to_bertviz(cap), html_action="return"))
    assert params["include_layers"] == [1, 4] and params["heads"] == [0, 2, 5]
    everything, *pairs = params["attention"]
    assert everything["left_text"] == list(cap.tokens) == everything["right_text"]
    assert [p["name"] for p in pairs][0] == "Sentence A -> Sentence A"
    assert pairs[0]["left_text"] == ["[CLS]", "a", "[SEP]"]
    attn = np.array(everything["attn"])
    assert attn.shape == (2, 6, 5, 5)  # both layers; heads at their real indices 0..5
    np.testing.assert_allclose(attn[:, [0, 2, 5]], cap.attention, rtol=1e-6)
    assert not attn[:, [1, 3, 4]].any()  # not captured: zeros, not shown (heads=[0, 2, 5])


def test_model_view_selects_the_captured_heads_by_real_index():
    bertviz = pytest.importorskip("bertviz")
    cap = make("float32")
    kwargs = to_bertviz(cap, view="model")
    assert "heads" not in kwargs  # model_view takes include_heads, head_view heads
    params = _params(bertviz.model_view(**kwargs, html_action="return"))
    assert params["include_layers"] == [1, 4] and params["include_heads"] == [0, 2, 5]
    attn = np.array(params["attention"][0]["attn"])
    np.testing.assert_allclose(attn, cap.attention, rtol=1e-6)  # labels 1, 4 / 0, 2, 5


def test_norm_weights_are_row_normalised_writable_and_warn_nothing():
    bertviz = pytest.importorskip("bertviz")
    torch = pytest.importorskip("torch")
    cap = _norm_capture()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy on a read-only array warns
        kwargs = to_bertviz(cap, "alpha_fx_norm")
    att = kwargs["attention"]
    assert len(att) == 10 and all(isinstance(a, torch.Tensor) for a in att)
    assert att[1] is att[8] and not att[1].any()  # the layers not captured: one zero tensor
    att[9][0, 0, 0, 0] = 1.0  # writable, and the capture is untouched
    assert cap.alpha_fx_norm[1, 0, 0, 0] != 1.0
    params = _params(
        bertviz.model_view(**to_bertviz(cap, "alpha_fx_norm", view="model"), html_action="return")
    )
    assert params["include_layers"] == [0, 9] and params["include_heads"] == [1, 3, 4]
    attn = np.array(params["attention"][0]["attn"])  # [2, 3, 5, 5]
    sums = cap.alpha_fx_norm.sum(-1, keepdims=True)
    want = np.divide(cap.alpha_fx_norm, sums, out=np.zeros((2, 3, 5, 5)), where=sums > 0)
    assert not want[1, 2, 0].any() and np.allclose(want[0].sum(-1), 1)
    np.testing.assert_allclose(attn, want, rtol=1e-5)
    assert params["attention"][0]["left_text"][1] == " a"  # BertViz prettifies Ġ


def test_numpy_mode_has_the_same_layout():
    cap = make("uint8")
    view = to_bertviz(cap, torch=False)
    assert view["tokens"] == list(cap.tokens) and view["sentence_b_start"] == 3
    assert len(view["attention"]) == 5 and view["include_layers"] == [1, 4]
    for k, layer in zip(cap.layers, view["attention"][1::3], strict=True):
        assert layer.shape == (1, 6, 5, 5) and layer.dtype == np.float32
        assert layer.flags.writeable
        np.testing.assert_array_equal(layer[0, [0, 2, 5]], cap.attention[cap.layers.index(k)])


def test_bad_input_says_what_is_missing(monkeypatch):
    cap = make("float32")
    with pytest.raises(UsageError, match="attention or alpha_fx_norm, not 'scores'.*softmax"):
        to_bertviz(cap, "scores", torch=False)
    with pytest.raises(UsageError, match="'head' .* or 'model'"):
        to_bertviz(cap, view="neuron", torch=False)
    with pytest.raises(UsageError, match=r"no 'alpha_fx_norm' .*--what alpha_fx_norm"):
        to_bertviz(cap, "alpha_fx_norm", torch=False)
    monkeypatch.setattr(adapter, "_torch_installed", lambda: False)
    with pytest.raises(UsageError, match="BertViz needs torch.*pip install torch"):
        to_bertviz(cap)
    assert to_bertviz(cap, torch=False)["attention"][4].shape == (1, 6, 5, 5)
