"""One CLI grammar: the same flags and value syntax in every command, every option's
default in its help, the long-text policy and its counts, --version."""

from __future__ import annotations

import argparse
import io
import json
import re

import numpy as np
import pytest

import jaxattn
from jaxattn.cli import build_parser, main


def _options():
    parser = build_parser()
    for name, sub in parser.commands.items():
        for action in sub._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                yield name, sub, action


@pytest.mark.parametrize(
    "command, sub, action",
    [pytest.param(*o, id=f"{o[0]} {o[2].option_strings[0]}") for o in _options()],
)
def test_every_option_has_help_that_states_its_default(command, sub, action):
    if isinstance(action, argparse._HelpAction):
        return
    assert action.help, f"jaxattn {command} {action.option_strings[0]} has no help"
    rendered = sub.formatter_class(prog="x")._get_help_string(action)
    if action.default not in (None, False) and not action.required:
        assert "default" in rendered, f"{command} {action.option_strings[0]}: {rendered}"


def test_shared_flags_are_spelled_one_way():
    seen: dict[str, set] = {}
    for command, _, action in _options():
        for flag in action.option_strings:
            seen.setdefault(flag, set()).add(command)
    for flag in ("--layer", "--head", "--truncate", "--chunk-size", "-N"):
        assert flag not in seen, f"{flag} is not the CLI's spelling"
    assert {"capture", "view", "dump"} <= seen["--layers"]
    assert {"capture", "view", "analyze", "dump"} <= seen["--too-long"]
    assert {"view", "analyze", "dump", "bench"} <= seen["--limit"]
    # --precision is the compute precision wherever it appears (view's old meaning moved)
    for command, _, action in _options():
        if "--precision" in action.option_strings:
            assert set(action.choices) == {"highest", "tf32", "bf16"}, command


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jaxattn {jaxattn.__version__}"


def test_layers_and_heads_take_negative_indices_and_ranges(bert_checkpoint, tmp_path, capsys):
    out = tmp_path / "c.npz"
    code = main(
        [
            "capture",
            "a short sentence",
            "--model",
            str(bert_checkpoint),
            "--layers",
            "0, -1",
            "--heads",
            "1:3",
            "--what",
            "attention, alpha_fx_norm",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    cap = jaxattn.Capture.load(out)
    assert cap.layers == (0, 2) and cap.heads == (1, 2)
    assert set(cap.what) == {"attention", "alpha_fx_norm"}
    assert cap.text == "a short sentence" and cap.provenance["source"] == "engine"
    assert cap.provenance["weights"].startswith("blake2b:")
    assert main(["capture", "again", "--model", str(bert_checkpoint), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (
        main(
            ["capture", "again", "--model", str(bert_checkpoint), "--out", str(out), "--overwrite"]
        )
        == 0
    )
    assert jaxattn.Capture.load(out).text == "again"


def test_too_long_is_one_policy_with_counts(bert_checkpoint, tmp_path, capsys):
    long = "word " * 100
    corpus = tmp_path / "c.txt"
    corpus.write_text(f"short one\n{long}\nshort two\n")
    model = ["--model", str(bert_checkpoint)]
    assert (
        main(
            [
                "analyze",
                str(corpus),
                "--out",
                str(tmp_path / "r.json"),
                "--quiet",
                "--no-head-distance",
                *model,
            ]
        )
        == 1
    )
    assert "--too-long truncate" in capsys.readouterr().err
    assert (
        main(
            [
                "analyze",
                str(corpus),
                "--out",
                str(tmp_path / "r.json"),
                "--quiet",
                "--no-head-distance",
                "--too-long",
                "skip",
                *model,
            ]
        )
        == 0
    )
    assert "1 skipped as too long" in capsys.readouterr().err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["meta"]["skipped"] == 1 and report["meta"]["truncated"] == 0
    assert (
        main(
            [
                "view",
                str(corpus),
                "--out",
                str(tmp_path / "v.html"),
                "--too-long",
                "truncate",
                *model,
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "1 truncated" in captured.err and "3 example(s)" in captured.out
    assert main(["capture", long, "--too-long", "truncate", *model]) == 0
    assert "truncated to the model's limit" in capsys.readouterr().out
    assert main(["capture", long, "--truncate", *model]) == 2  # the 0.2 flag is gone
    assert "unknown option --truncate" in capsys.readouterr().err


def test_view_draws_the_layer_and_heads_it_is_given(bert_checkpoint, tmp_path, capsys):
    svg = tmp_path / "h.svg"
    args = ["view", "one two three", "--model", str(bert_checkpoint), "--out", str(svg)]
    assert main([*args, "--layers", "-1", "--heads", "0,2"]) == 0, capsys.readouterr().err
    assert "<svg" in svg.read_text()
    assert main([*args, "--layers", "0:2", "--overwrite"]) == 2
    assert "--layers: the head view draws one" in capsys.readouterr().err
    assert main([*args, "--format", "png", "--overwrite"]) == 2  # an SVG named .png? no
    assert f"--format png and --out {svg} disagree" in capsys.readouterr().err


def test_view_writes_the_format_out_names_and_refuses_another(bert_checkpoint, tmp_path, capsys):
    """An HTML page named x.pdf is no PDF: a suffix view does not write is refused."""
    args = ["view", "one two", "--model", str(bert_checkpoint), "--out"]
    for name in ("v.pdf", "v.JPG", "v.npz"):
        assert main([*args, str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        suffix = name[name.rindex(".") :].lower()
        assert f"--out {tmp_path / name}: view writes HTML (.html, .htm), SVG" in err
        assert f"not {suffix}: give --out one of those names, or --format html" in err
        assert not (tmp_path / name).exists()
    for mode in (
        ["--global"],
        ["--compare", str(bert_checkpoint), f"{bert_checkpoint},dtype=uint8"],
    ):
        assert main(["view", *mode, "one two", "--out", str(tmp_path / "g.pdf")]) == 2
        assert "view writes HTML (.html, .htm)" in capsys.readouterr().err
    for name, extra in (("page", []), ("v.pdf", ["--format", "html"])):  # named outright
        assert main([*args, str(tmp_path / name), *extra]) == 0, capsys.readouterr().err
        assert (tmp_path / name).read_text().lstrip().lower().startswith("<!doctype html")


def test_selections_may_start_with_a_minus(bert_checkpoint, tmp_path, capsys):
    """The README's `--layers -2:`: argparse would take "-2:" for an option."""
    out = tmp_path / "c.npz"
    assert (
        main(
            [
                "capture",
                "one two",
                "--model",
                str(bert_checkpoint),
                "--layers",
                "-2:",
                "--heads",
                "-3,-1",
                "--out",
                str(out),
            ]
        )
        == 0
    ), capsys.readouterr().err
    cap = jaxattn.Capture.load(out)
    assert cap.layers == (1, 2) and cap.heads == (0, 2)
    assert main(["capture", "one two", "--model", str(bert_checkpoint), "a", "b"]) == 2
    assert main(["capture", "a ||| b", "c", "--model", str(bert_checkpoint)]) == 2
    assert "already a pair" in capsys.readouterr().err
    from jaxattn.cli.args import join_selections

    assert join_selections(["x", "--", "--layers", "-1"]) == ["x", "--", "--layers", "-1"]


def _labels(svg: str, prefix: str) -> set[str]:
    return set(re.findall(rf">({prefix}\d+)</text>", svg))


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_capture_dash_reads_one_example_from_standard_input(
    bert_checkpoint, tmp_path, monkeypatch, capsys
):
    """`echo "A ||| B" | jaxattn capture -`: the example on standard input, read as an
    input file is; a literal "-" captured instead was the pipe ignored."""
    model = ["--model", str(bert_checkpoint), "--what", "attention"]
    for data in (b"one two ||| three\n", b'{"text": "one two", "text_b": "three"}\n'):
        _stdin(monkeypatch, data)
        assert main(["capture", "-", *model, "--out", str(tmp_path / "s.npz"), "--overwrite"]) == 0
        assert jaxattn.Capture.load(tmp_path / "s.npz").text == ("one two", "three")
    capsys.readouterr()
    for data, says in (
        (b"one\ntwo\n", "holds more than one example: capture takes one"),
        (b"\n \n", "holds no example: capture takes one"),
        (b"caf\xe9\n", "standard input:1: invalid UTF-8 at byte 4"),
    ):
        _stdin(monkeypatch, data)
        assert main(["capture", "-", *model]) == 1
        err = capsys.readouterr().err
        assert f"jaxattn capture: error: {'standard input (TEXT -) ' * ('capture' in says)}" in err
        assert says in err and "jaxattn-stdin" not in err
    for command, out, says in (
        ("analyze", "r.json", "standard input has no examples"),
        ("view", "v.html", "no example to view in standard input"),
    ):
        _stdin(monkeypatch, b"\n")  # "- has no examples" named no input
        assert main([command, "-", *model[:2], "--out", str(tmp_path / out)]) == 1
        assert f"jaxattn {command}: error: {says}" in capsys.readouterr().err


def test_view_of_a_saved_capture_shows_the_selection(bert_checkpoint, tmp_path, capsys):
    saved = tmp_path / "c.npz"
    assert (
        main(
            [
                "capture",
                "one two three",
                "--model",
                str(bert_checkpoint),
                "--what",
                "attention,alpha_fx_norm",
                "--out",
                str(saved),
            ]
        )
        == 0
    )
    out = tmp_path / "v.svg"
    for view in ("model", "stats"):
        code = main(
            [
                "view",
                str(saved),
                "--views",
                view,
                "--layers",
                "1:",
                "--heads",
                "0,2",
                "--out",
                str(out),
                "--overwrite",
            ]
        )
        assert code == 0, capsys.readouterr().err
        svg = out.read_text()
        assert _labels(svg, "L") == {"L1", "L2"}, view
        # Head labels: "H0" over the model view's columns, bare numbers over the stats grids.
        heads = set(re.findall(r'text-anchor="middle" fill="#666">H?(\d+)</text>', svg))
        assert heads == {"0", "2"}, view
    assert main(["view", str(saved), "--layers", "-1", "--out", str(tmp_path / "v.html")]) == 0
    assert "1 example(s)" in capsys.readouterr().out
    one = tmp_path / "one.npz"
    assert (
        main(
            [
                "capture",
                "one two",
                "--model",
                str(bert_checkpoint),
                "--layers",
                "0",
                "--out",
                str(one),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "view",
                str(one),
                "--views",
                "model",
                "--layers",
                "1",
                "--out",
                str(out),
                "--overwrite",
            ]
        )
        == 2
    )
    assert "--layers [1] were not captured (have [0])" in capsys.readouterr().err


def test_a_saved_capture_remembers_where_it_came_from(engines, tmp_path):
    cap = engines["bert"].capture([("a b", "c d")], what=("attention",), dtype="uint8")[0]
    cap.save(tmp_path / "c.npz")
    back = jaxattn.Capture.load(tmp_path / "c.npz")
    assert back.text == ("a b", "c d") and back.dtype == "uint8"
    info = engines["bert"].model_info()
    assert dict(back.provenance) == {
        "model": info.name,
        "family": "bert",
        "causal": False,
        "num_key_value_heads": info.num_key_value_heads,
        "weights": info.weights,
        "revision": "",
        "config": engines["bert"].config.to_dict(),
        "jaxattn": jaxattn.__version__,
        "source": "engine",
    }
    np.testing.assert_array_equal(back.encoded("attention")[0], cap.encoded("attention")[0])


def test_serve_and_web_say_why_they_cannot_listen(bert_checkpoint, capsys):
    """Before the model loads: a port in use, a host that does not resolve."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = str(taken.getsockname()[1])
        for command in ("serve", "web"):
            assert main([command, "--model", str(bert_checkpoint), "--port", busy]) == 2
            err = capsys.readouterr().err
            assert f"cannot listen on 127.0.0.1:{busy}: --port {busy} is in use" in err, err
            assert "internal error" not in err
    assert main(["web", "--host", "no-such-host.invalid", "--port", "0"]) == 2
    assert "--host 'no-such-host.invalid' does not resolve" in capsys.readouterr().err
    assert main(["web", "--host", "::", "--port", "0"]) == 2  # the web server is IPv4 only
    assert "--host '::' does not resolve to an IPv4 address" in capsys.readouterr().err
