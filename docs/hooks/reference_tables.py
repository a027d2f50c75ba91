"""The docs' lists that the code also holds, written from the code or checked against it.

Generated tables sit in the pages between two comments,

    <!-- generated: quantities -->
    ...
    <!-- end: quantities -->

so the pages read the same on GitHub and in the site. Regenerate them after
changing the code they come from:

    .venv/bin/python docs/hooks/reference_tables.py          # rewrite stale tables
    .venv/bin/python docs/hooks/reference_tables.py --check  # exit 1 if one is stale

The site's hook (`repo_pages.py`) runs `refresh` on every page and warns about a
stale table, and runs `check` on the pages whose hand-written tables list what
the code defines (docs/families.md: every model type and family; docs/errors.md:
every error class with its exit code); `mkdocs build --strict` fails on either.

What the code does not hold (a precision's measured errors, what a head
statistic means) is in the tables below, keyed by the code's
names: a name the code gains without an entry here is an error, not a gap.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the tree these docs describe, before any installed copy
    sys.path.insert(0, str(ROOT))

# --- what the code does not say ------------------------------------------------------

# Errors against `highest`, measured on all-MiniLM-L6-v2 over 200 EWT dev sentences
# (tests/test_precision.py holds the bounds): operands, attention (largest absolute
# difference), the norms and the hidden states (relative to the tensor's largest value).
PRECISION_ERRORS = {
    "highest": ("float32", "exact (PyTorch parity within 1e-5)", "exact", "exact", "everywhere"),
    "tf32": (
        "10 mantissa bits",
        "≤ 2.0e-3",
        "≤ 2.0e-3",
        "≤ 4.1e-4",
        "NVIDIA A100/H100 tensor cores",
    ),
    "bf16": ("7 mantissa bits", "≤ 1.6e-2", "≤ 1.4e-2", "≤ 3.1e-3", "GPU/TPU tensor units"),
}

HEAD_STAT_MEANINGS = {
    "cls": "attention to [CLS] (the first special token)",
    "sep": "attention to [SEP] (the separators)",
    "punct": "attention to punctuation",
    "self": "attention to the token itself",
    "prev": "attention to the previous token",
    "next": "attention to the next token",
    "entropy": "entropy of a row, rows smoothed by 1e-4 as Clark et al.'s code does",
    "entropy_cls": "entropy of the [CLS] row (NaN without a [CLS] token)",
    "sep_sep": "attention of [SEP] to [SEP]",
    "rest_sep": "attention of the other tokens to [SEP]",
}

DECODER_HEAD_STAT_MEANINGS = {
    "first": "attention to the first token (the attention sink, Xiao et al. 2023)",
    "prev": "attention to the previous token (j = i - 1)",
    "self": "attention to the token itself (j = i)",
    "punct": "attention to punctuation",
    "entropy": "entropy of a row, smoothed by 1e-4 over the i + 1 keys j <= i a causal row "
    "can see (an encoder's: over its n keys)",
}

NORM_MEASURE_MEANINGS = {
    "Attn-N": "v_ij = Σ_h α^h_ij f_h(x_j): the attention block's output, all heads",
    "AttnRes-N": "v_ij = Σ_h α^h_ij f_h(x_j) + δ_ij x_j: with the residual",
    "AttnResLn-N": "the AttnRes-N vector through the LayerNorm, with its real statistics",
}


# --- generated tables ------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text as one Markdown table cell: pipes, asterisks and underscores escaped."""
    return re.sub(r"([|*_])", r"\\\1", text)


# The code's ASCII maths, as the papers write it (only where the ASCII is unambiguous:
# "alpha^", "delta_", "sum_", not the names alpha_fx_norm or HEAD_STATS).
_MATHS = (
    (r"\|\|", "‖"),
    (r"\balpha(?=\^)", "α"),
    (r"\bdelta(?=_)", "δ"),
    (r"\bgamma\b", "γ"),
    (r"\bsum(?=_)", "Σ"),
    (r"\bsqrt(?=\()", "√"),
    (r" != ", " ≠ "),
    (r"(?<=\w) \. (?=\w)", " · "),
)


def _maths(text: str) -> str:
    for pattern, symbol in _MATHS:
        text = re.sub(pattern, symbol, text)
    return text


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _exactly(what: str, table: dict, names) -> None:
    if set(table) != set(names):
        raise KeyError(f"{what}: the code has {sorted(names)}, this file {sorted(table)}")


def quantities() -> str:
    from jaxattn.quantities import QUANTITIES

    rows = []
    for q in QUANTITIES.values():
        axes = list(q.axes)
        if q.extra_layer:
            axes[0] += f"+{q.extra_layer}"
        uint8 = "q/255" if q.probability else ("affine" if q.uint8 else "no")
        rows.append((f"`{q.name}`", "[" + ", ".join(axes) + "]", uint8, _cell(_maths(q.doc))))
    return _table(("quantity", "shape", "uint8", "definition"), rows)


def head_stats() -> str:
    from jaxattn.quantities import HEAD_STATS

    _exactly("HEAD_STAT_MEANINGS", HEAD_STAT_MEANINGS, HEAD_STATS)
    rows = [(str(i), f"`{n}`", HEAD_STAT_MEANINGS[n]) for i, n in enumerate(HEAD_STATS)]
    return _table(("N", "statistic", "meaning"), rows)


def decoder_head_stats() -> str:
    from jaxattn.quantities import DECODER_HEAD_STATS

    _exactly("DECODER_HEAD_STAT_MEANINGS", DECODER_HEAD_STAT_MEANINGS, DECODER_HEAD_STATS)
    rows = [
        (str(i), f"`{n}`", DECODER_HEAD_STAT_MEANINGS[n]) for i, n in enumerate(DECODER_HEAD_STATS)
    ]
    return _table(("P", "statistic", "meaning (a mean over query rows 1 .. n-1)"), rows)


def norm_measures() -> str:
    from jaxattn.quantities import NORM_MEASURES

    _exactly("NORM_MEASURE_MEANINGS", NORM_MEASURE_MEANINGS, NORM_MEASURES)
    rows = [(str(i), f"`{n}`", NORM_MEASURE_MEANINGS[n]) for i, n in enumerate(NORM_MEASURES)]
    return _table(("M", "measure", "token j's contribution v_ij to position i"), rows)


def dtypes() -> str:
    from jaxattn.dtypes import DTYPES

    rows = [(f"`{n}`", str(d.dtype.itemsize), _cell(d.error)) for n, d in DTYPES.items()]
    return _table(("dtype", "bytes", "error against float32"), rows)


def precisions() -> str:
    from jaxattn.spec import PRECISIONS

    _exactly("PRECISION_ERRORS", PRECISION_ERRORS, PRECISIONS)
    rows = [(f"`{n}`", *PRECISION_ERRORS[n]) for n in PRECISIONS]
    header = ("precision", "operands", "attention", "‖αf(x)‖, Σ‖αf(x)‖", "hidden states", "fast on")
    return _table(header, rows)


PROTO = ROOT / "protos" / "jaxattn" / "v1" / "attention.proto"
_PROTO_FIELD = re.compile(r"^\s*((?:repeated |optional )?[\w.]+) (\w+) = (\d+);")


def _first_sentence(comment: list[str]) -> str:
    text = " ".join(line.strip() for line in comment).strip()
    for m in re.finditer(r"\.(?:\s|$)", text):
        if not re.search(r"\b(e\.g|i\.e)$", text[: m.start()]):
            return text[: m.start() + 1]
    return text


def proto_fields() -> str:
    """Every message's fields, from the .proto, each with the first sentence of its comment."""
    out, message, comment, rows, oneof = [], None, [], [], False
    for line in PROTO.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped[2:])
            continue
        if m := re.match(r"message (\w+) \{", stripped):
            message, rows = m[1], []
        elif message and re.match(r"oneof \w+ \{", stripped):
            oneof = True  # its fields are the message's; its "}" does not end the message
        elif message and (m := _PROTO_FIELD.match(line)):
            rows.append((f"`{m[2]}`", f"`{m[1]}`", m[3], _cell(_first_sentence(comment))))
        elif message and stripped == "}" and oneof:
            oneof = False
        elif message and stripped == "}":
            if rows:
                out.append(f"### {message}\n\n" + _table(("field", "type", "#", "meaning"), rows))
            message = None
        comment = []
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "quantities": quantities,
    "head-stats": head_stats,
    "decoder-head-stats": decoder_head_stats,
    "norm-measures": norm_measures,
    "dtypes": dtypes,
    "precisions": precisions,
    "proto-fields": proto_fields,
}

_BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end: \2 -->)", re.S)


def refresh(markdown: str) -> tuple[str, list[str]]:
    """The page with its generated tables rewritten, and the names of those that changed."""
    stale = []

    def sub(m: re.Match) -> str:
        name = m[2]
        if name not in GENERATORS:
            raise KeyError(f"no generated table '{name}' (valid: {', '.join(GENERATORS)})")
        body = GENERATORS[name]()
        if m[3] != body:
            stale.append(name)
        return m[1] + body + m[4]

    return _BLOCK.sub(sub, markdown), stale


# --- hand-written tables checked against the code --------------------------------------


def _check_families(markdown: str) -> list[str]:
    """docs/families.md's first table: every config.json model_type with its family."""
    from jaxattn.checkpoints.families import MODEL_TYPES
    from jaxattn.config import FAMILIES

    listed = {}
    for row in re.findall(r"^\| *(`[^|]*) *\| *([\w-]+) *\|", markdown, re.M):
        for model_type in re.findall(r"`([^`]+)`", row[0]):
            listed[model_type] = row[1]
    code = {t: f.name for t, f in MODEL_TYPES.items()}
    problems = []
    if listed != code:
        problems.append(f"the families table lists {listed}; the code reads {code}")
    missing = set(FAMILIES) - set(listed.values())
    if missing:
        problems.append(f"the families table lacks jaxattn.config.FAMILIES {sorted(missing)}")
    return problems


def _check_errors(markdown: str) -> list[str]:
    """docs/errors.md: the exit codes table and every error class with its exit code."""
    import jaxattn.errors as errors

    problems = []
    codes = set(re.findall(r"^\| (\d+) \|", markdown, re.M))
    if codes != {"0", "1", "2", "130"}:
        problems.append(f"the exit codes table has {sorted(codes)}, not 0, 1, 2 and 130")
    tree = dict(
        re.findall(r"\b(\w*Error)\b[^\n]*?\bexit (\d+)", markdown.split("## The classes")[1])
    )
    classes = {
        name: str(cls.exit_code)
        for name, cls in vars(errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, errors.JaxattnError)
        and cls is not errors.JaxattnError
    }
    for name, code in classes.items():
        if tree.get(name) != code:
            problems.append(f"'The classes' should list {name} with exit {code}")
    return problems


CHECKS: dict[str, Callable[[str], list[str]]] = {
    "docs/families.md": _check_families,
    "docs/errors.md": _check_errors,
}


def check(repo_path: str, markdown: str) -> list[str]:
    """What the page's hand-written tables get wrong about the code (none: [])."""
    return CHECKS[repo_path](markdown) if repo_path in CHECKS else []


def pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + sorted(ROOT.glob("*.md"))


def main(argv: list[str]) -> int:
    only_check = "--check" in argv
    stale_pages = []
    for path in pages():
        text = path.read_text(encoding="utf-8")
        new, stale = refresh(text)
        if stale:
            stale_pages.append(f"{path.relative_to(ROOT)} ({', '.join(stale)})")
            if not only_check:
                path.write_text(new, encoding="utf-8")
    verb = "stale" if only_check else "rewritten"
    for page in stale_pages:
        print(f"{verb}: {page}")
    return 1 if only_check and stale_pages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
