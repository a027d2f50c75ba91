"""views.to_bertviz: a Capture as the arguments of BertViz's head_view / model_view."""

from __future__ import annotations

import numpy as np
import pytest
from capture_samples import make

from jaxattn.views import to_bertviz


def test_to_bertviz_gives_per_layer_1_h_t_t_and_tokens():
    cap = make("uint8")
    view = to_bertviz(cap, torch=False)
    assert view["tokens"] == list(cap.tokens) and view["sentence_b_start"] == 3
    assert len(view["attention"]) == 2
    for k, layer in enumerate(view["attention"]):
        assert layer.shape == (1, 3, 5, 5) and layer.dtype == np.float32
        np.testing.assert_array_equal(layer[0], cap.attention[k])  # dequantised


def test_to_bertviz_torch_tensors_for_bertviz():
    torch = pytest.importorskip("torch")
    view = to_bertviz(make("float32"), torch=True)
    assert all(isinstance(a, torch.Tensor) and a.shape == (1, 3, 5, 5) for a in view["attention"])
    # What bertviz's format_attention does with them:
    stacked = torch.stack([a.squeeze(0) for a in view["attention"]])
    assert stacked.shape == (2, 3, 5, 5)


def test_to_bertviz_names_valid_quantities():
    with pytest.raises(ValueError, match="attention"):
        to_bertviz(make("float32"), "fx_norm", torch=False)
