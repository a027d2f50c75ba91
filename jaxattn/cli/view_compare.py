"""`jaxattn view [INPUT...] --compare A B --out cmp.html`: two captures of the same texts.

Each side is ``SOURCE[,key=value...]`` (docs/compare.md):

- SOURCE: a model (a checkpoint directory, or ``default`` for the embedded
  MiniLM), a capture file (``.npz``) or a store of ``jaxattn dump`` (a directory
  or a TensorStore URL);
- keys: ``precision=highest|tf32|bf16`` (compute precision) and
  ``dtype=float32|float16|bfloat16|uint8`` (output encoding), for a model only;
  ``kind=attention|norm`` (α, or ‖αf(x)‖ rows normalised), for any side.

A model side captures INPUT's texts (else the texts the other, saved side
holds) with the local engine, asking only for the quantity its kind needs, under
--layers/--heads/--too-long/--limit; --precision is the default of both sides, and
--attention/--attention-block run both sides' engines.
Saved sides bring their texts; --layers/--heads pick from what they hold.
Example i of A is paired with example i of B (`jaxattn.views.compare`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from jaxattn import outfile
from jaxattn.analysis.weights import WEIGHT_KINDS
from jaxattn.cli.args import (
    check_output,
    engine_flags,
    engine_options,
    ensure_parent,
    opened_example,
)
from jaxattn.cli.corpus import read_inputs, report
from jaxattn.cli.saved import is_capture_file, is_store, open_saved, require
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import InputError, UsageError
from jaxattn.spec import PRECISIONS

DEFAULT = "default"
KEYS = {"precision": PRECISIONS, "dtype": tuple(OUTPUT_DTYPES), "kind": tuple(WEIGHT_KINDS)}
MODEL_ONLY = ("precision", "dtype")


@dataclasses.dataclass
class Side:
    """One side of the comparison as the command line names it."""

    name: str  # "A" or "B"
    arg: str  # the argument as given
    source: str
    options: dict
    saved: object = None  # a store or [Capture] for saved captures; None for a model

    @property
    def kind(self) -> str:
        """The weights it shows (`jaxattn.analysis.weights.WEIGHT_KINDS`)."""
        return self.options.get("kind", "attention")

    @property
    def where(self) -> str:
        return f"--compare {self.name} {self.arg!r}"


def add_arguments(parser) -> None:
    """Add this mode's own options to the view parser (it has none: A and B carry them)."""


def parse_side(arg: str, name: str) -> Side:
    """`SOURCE[,key=value...]` -> a Side (UsageError: an empty source, an unknown key or value)."""
    source, *pairs = arg.split(",")
    if not source.strip():
        raise UsageError(
            f"--compare {name} {arg!r}: give a SOURCE before the keys (a model "
            "directory, 'default', a .npz capture file or a store)"
        )
    options: dict = {}
    for item in pairs:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in KEYS or not eq:
            raise UsageError(
                f"--compare {name} {arg!r}: unknown key {item!r}; keys are "
                f"{', '.join(k + '=' for k in KEYS)}"
            )
        if value not in KEYS[key]:
            raise UsageError(
                f"--compare {name} {arg!r}: {key}={value!r} is not one of {', '.join(KEYS[key])}"
            )
        if key in options:
            raise UsageError(f"--compare {name} {arg!r}: {key}= is given twice")
        options[key] = value
    return Side(name=name, arg=arg, source=source.strip(), options=options)


def open_side(side: Side) -> Side:
    """Resolve the side's SOURCE: saved captures are opened (lazily), a model is checked.

    Raises:
      UsageError: a SOURCE that is none of the forms, model keys on saved captures.
      CaptureFileError: an unreadable capture file or store.
    """
    side.saved = open_saved(side.source)
    if side.saved is not None:
        given = [k for k in MODEL_ONLY if k in side.options]
        if given:
            raise UsageError(
                f"{side.where}: {', '.join(k + '=' for k in given)} choose how a "
                "model captures; saved captures are compared as saved"
            )
        require(side.saved, (WEIGHT_KINDS[side.kind],), side.where, f"kind={side.kind}")
    elif side.source != DEFAULT and not Path(side.source).is_dir():
        raise UsageError(
            f"{side.where}: {side.source!r} is no model directory, capture file "
            f"(.npz) or store; use '{DEFAULT}' for the embedded model"
        )
    return side


def _check_flags(args) -> None:
    if args.server:
        raise UsageError(
            "--server: --compare captures with the local models named in A and B; compare a "
            "server's captures saved with jaxattn capture --out FILE.npz"
        )
    if args.model:
        raise UsageError(
            "--model: with --compare the models are A and B (e.g. --compare "
            f"{args.model} {DEFAULT})"
        )
    if (args.format or "html") != "html" or Path(args.out).suffix.lower() in (".svg", ".png"):
        raise UsageError("--compare writes an HTML page: give --out FILE.html")


def _texts(args, sides: list[Side]) -> list | None:
    """The texts the model sides capture: INPUT's, else a saved side's (None: no model side)."""
    if all(s.saved is not None for s in sides):
        if args.inputs:
            raise UsageError("A and B are saved captures and bring their texts: drop INPUT")
        given = (["--precision"] if args.precision else []) + engine_flags(args)
        if given:
            raise UsageError(f"A and B are saved captures, compared as saved: drop {given[0]}")
        return None
    if args.inputs:
        items = _read_texts(args.inputs, args.limit)
        if not items:
            raise InputError(None, f"no text to compare in {' '.join(args.inputs)}")
        if len(items) > args.max_examples:
            raise UsageError(
                f"INPUT holds {len(items)} texts, over the page's cap of "
                f"{args.max_examples} (--max-examples): give --limit N"
            )
        return items
    saved = next((s for s in sides if s.saved is not None), None)
    if saved is None:
        model = sides[0]
        raise UsageError(f"{model.where} is a model: give the texts to capture as INPUT")
    texts = [c.text for c in _limited(args, saved)]
    if any(t is None for t in texts):
        raise UsageError(f"{saved.where} does not hold its texts: give them as INPUT")
    return texts


def _read_texts(inputs: list[str], limit: int | None) -> list:
    """INPUT's texts and pairs (`jaxattn.cli.corpus.read_inputs`), up to `limit`."""
    for arg in inputs:
        if is_store(arg) or is_capture_file(arg):
            raise UsageError(f"INPUT {arg} is saved captures: with --compare they go in A or B")
    return read_inputs(inputs, limit)


def _limited(args, side: Side) -> list:
    caps = side.saved
    if not args.limit and len(caps) > args.max_examples:
        raise UsageError(
            f"{side.where} holds {len(caps)} examples, over the page's cap of "
            f"{args.max_examples} (--max-examples): give --limit N"
        )
    return list(caps[: args.limit] if args.limit else caps)


def _capture(args, side: Side, texts: list, engines: dict) -> tuple[list, set]:
    """(captures, skipped input indices) of a model side."""
    import jaxattn

    key = None if side.source == DEFAULT else str(Path(side.source).resolve())
    if key not in engines:
        engines[key] = jaxattn.load(key, **engine_options(args))
    stream = engines[key].capture_iter(
        texts,
        what=(WEIGHT_KINDS[side.kind],),
        layers=args.layers,
        heads=args.heads,
        dtype=side.options.get("dtype", "float32"),
        too_long=args.too_long,
        precision=side.options.get("precision", args.precision),
    )
    caps = list(stream)
    report(stream, f"jaxattn view --compare {side.name}")
    return caps, set(stream.skipped)


def _label(side: Side, caps: list) -> str:
    from jaxattn.views.compare_page import side_label

    cap = caps[0]
    model = cap.provenance.get("model")
    return side_label(side.source, side.kind, cap.dtype, cap.precision, model)


def run(args) -> int:
    """Write the comparison page of `args.compare` (the module docstring)."""
    from jaxattn.views.compare import pair_all
    from jaxattn.views.compare_page import build_compare_html

    check_output(args.out, args.overwrite)
    _check_flags(args)
    sides = [open_side(parse_side(arg, name)) for arg, name in zip(args.compare, "AB", strict=True)]
    for side in sides:
        if side.saved is not None and not len(side.saved):
            raise InputError(
                None,
                f"{side.where} holds no examples: nothing to compare (dump "
                "texts into it first, or name another store)",
            )
    texts = _texts(args, sides)
    held, skipped, engines = [], set(), {}
    for side in sides:  # input index -> capture
        if side.saved is not None:
            held.append(dict(enumerate(_limited(args, side))))
        else:
            got, gone = _capture(args, side, texts, engines)
            kept = [i for i in range(len(texts)) if i not in gone]
            held.append(dict(zip(kept, got, strict=True)))
            skipped |= gone
    if skipped:  # a text a model skipped (--too-long skip) is left out of both sides
        common = sorted(held[0].keys() & held[1].keys())
        caps = [[h[i] for i in common] for h in held]
    else:
        caps = [list(h.values()) for h in held]
    if not caps[0] or not caps[1]:
        raise InputError(None, "every text was skipped (--too-long skip): nothing to compare")
    saved = any(s.saved is not None for s in sides)
    pairs = pair_all(
        caps[0],
        caps[1],
        sides[0].kind,
        sides[1].kind,
        args.layers if saved else None,
        args.heads if saved else None,
    )
    html = build_compare_html(
        pairs,
        (_label(sides[0], caps[0]), _label(sides[1], caps[1])),
        embed=args.embed_dtype,
        title=args.title if args.title != "jaxattn views" else "jaxattn compare",
        max_examples=args.max_examples,
        example=opened_example(args.example, len(pairs)),
    )
    outfile.write_text(ensure_parent(args.out), html)
    level = pairs[0].level if len({p.level for p in pairs}) == 1 else "token/word"
    print(f"wrote {args.out} (compare, {level} level; {len(pairs)} example(s))")
    return 0
