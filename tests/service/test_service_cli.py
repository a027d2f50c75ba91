"""`jaxattn capture` (local and --server), `jaxattn demo`, and `jaxattn serve --help`."""

from __future__ import annotations

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from service_support import WHAT

import jaxattn.checkpoints.loading
from jaxattn import Capture
from jaxattn.cli import main


@pytest.fixture
def loads(monkeypatch, svc_engine):
    """jaxattn.load returns the session engine (no second load/compile); records paths."""
    paths = []

    def fake_load(path=None, **kw):
        paths.append(path)
        return svc_engine

    monkeypatch.setattr(jaxattn.checkpoints.loading, "load", fake_load)
    return paths


def test_capture_through_a_server_saves_what_the_engine_computes(
    address, svc_engine, tmp_path, capsys
):
    out = tmp_path / "pair.npz"
    code = main(
        [
            "capture",
            EXAMPLE_A,
            EXAMPLE_B,
            "--server",
            address,
            "--what",
            ",".join(WHAT),
            "--codec",
            "lz4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "[CLS] i went to the store . [SEP]" in printed and "sentence B starts" in printed
    saved = Capture.load(out)
    (want,) = svc_engine.capture([(EXAMPLE_A, EXAMPLE_B)], what=WHAT)
    assert saved.tokens == want.tokens
    np.testing.assert_allclose(saved.attention, want.attention, rtol=1e-5, atol=1e-6)


def test_capture_locally_without_a_server(loads, svc_checkpoint, tmp_path, capsys):
    out = tmp_path / "one.npz"
    code = main(
        [
            "capture",
            EXAMPLE_A,
            "--model",
            str(svc_checkpoint),
            "--what",
            ",".join(WHAT),
            "--layers",
            "0,2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert loads == [str(svc_checkpoint)]
    cap = Capture.load(out)
    assert cap.layers == (0, 2) and cap.attention.shape[:2] == (2, 3)
    assert "alpha_fx_norm" in capsys.readouterr().out


def test_capture_reports_server_refusals_as_errors(address, capsys):
    code = main(["capture", EXAMPLE_A, "--server", address, "--layers", "9"])
    assert code == 2
    err = capsys.readouterr().err
    assert "INVALID_ARGUMENT" in err and "layers" in err
    assert f"error: the server at {address} answered INVALID_ARGUMENT: " in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_capture_reads_a_pair_written_with_bars(address, capsys):
    assert main(["capture", f"{EXAMPLE_A} ||| {EXAMPLE_B}", "--server", address]) == 0
    assert "sentence B starts at token 8" in capsys.readouterr().out


def test_demo_serves_captures_summarises_and_stops(loads, capsys):
    assert main(["demo", "--model", "tiny"]) == 0
    out = capsys.readouterr().out
    assert loads == ["tiny"]
    assert "server on 127.0.0.1:" in out and "server stopped" in out
    assert "[CLS] i went to the store . [SEP] at the store ," in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 * 3  # per layer, for the single sentence and the pair
    for row in rows:
        entropy, cls_mass, sep_mass = map(float, row[1:4])
        assert entropy > 0 and 0 <= cls_mass <= 1 and 0 <= sep_mass <= 1


def test_demo_of_a_decoder_captures_the_pair_as_one_text(tmp_path, capsys):
    """A decoder reads no sentence pairs: demo --model DECODER failed on its own pair."""

    from gpt2_fixture import make_gpt2_checkpoint

    path = make_gpt2_checkpoint(tmp_path / "gpt2")
    assert main(["demo", "--model", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "error" not in err and "server stopped" in out
    assert "A B as one text (a decoder reads no pairs): 'I went to the store. At the" in out
    assert "a->first" in out and "[CLS]" not in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 * 3  # per layer, for the sentence and the two as one text


def test_serve_help_lists_the_options(capsys):
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for option in (
        "--model",
        "--host",
        "--port",
        "--queue-size",
        "--batch-window-ms",
        "--tls-cert",
        "--tls-key",
        "--token-file",
        "--max-texts",
        "--max-tokens",
    ):
        assert option in out


def test_model_with_server_must_be_the_model_the_server_serves(
    address, svc_checkpoint, checkpoint_dirs, tmp_path, capsys
):
    out = tmp_path / "c.npz"
    same = ["capture", EXAMPLE_A, "--server", address, "--model", str(svc_checkpoint)]
    assert main([*same, "--out", str(out)]) == 0, capsys.readouterr().err
    assert Capture.load(out).provenance["source"] == f"server {address}"
    other = checkpoint_dirs["roberta"]  # another model: refused, naming what is served
    capsys.readouterr()
    assert main(["capture", EXAMPLE_A, "--server", address, "--model", str(other)]) == 2
    (err,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert f"--model {other} is not the model the server {address} serves" in err
    assert "3 layers x 3 heads" in err
