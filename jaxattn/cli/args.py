"""The arguments several commands share, spelled and parsed one way: the CLI grammar.

Choices come from the tables (`jaxattn.dtypes.OUTPUT_DTYPES`,
`jaxattn.wire.CODECS`, `jaxattn.inputs.TOO_LONG`), so a new dtype, codec or
policy reaches every command. Lists take commas with or without spaces;
layers and heads take indices, negative ones and ranges (``0,3,-1``,
``8:12``: `jaxattn.selection.parse_selection`).

    add_source_arguments(p)     --server --model --attention --attention-block --token-file
                                --tls-ca --timeout
    engine_options(args)        what --attention and --attention-block ask of `jaxattn.load`
    engine_flags(args)          those of them given, as flags (to refuse where no engine runs)
    add_spec_arguments(p)       --what --layers --heads --query-positions --key-positions --dtype
    add_selection_arguments(p)  --layers --heads
    add_dtype_argument(p)       --dtype
    add_codec_argument(p)       --codec
    add_token_argument(p)       --token-file; read_token(path)
    read_flag_file(flag, path)  the bytes of a file a flag names (--tls-cert, --tls-ca, ...)
    add_precision_argument(p)   --precision
    add_too_long_argument(p)    --too-long
    add_limit_argument(p)       --limit
    add_overwrite_argument(p)   --overwrite; check_output(path, overwrite, flag)

The parser class of every command (one-line errors, every option's default in
its help, no abbreviations, the nearest spelling of a mistyped option) is
`jaxattn.cli.parser.Parser`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path

from jaxattn.cli.model_arg import MODEL_HELP, MODEL_METAVAR, model
from jaxattn.cli.parser import did_you_mean, nearest
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import InputError, UsageError
from jaxattn.inputs import TOO_LONG
from jaxattn.quantities import QUANTITIES
from jaxattn.selection import parse_selection, positions_of
from jaxattn.spec import DEFAULT_WHAT, PRECISIONS
from jaxattn.wire.codecs import CODECS


def names(value: str) -> tuple[str, ...]:
    """'attention, queries' -> ('attention', 'queries')."""
    out = tuple(v.strip() for v in value.split(",") if v.strip())
    if not out:
        raise argparse.ArgumentTypeError(f"{value!r} names nothing: give comma-separated names")
    return out


def quantity_names(value: str) -> tuple[str, ...]:
    """`names` that are quantities ('attention,queries'); a misspelt one gets the nearest."""
    out = names(value)
    for name in out:
        if name not in QUANTITIES:
            hint = did_you_mean(nearest(name, QUANTITIES), quote=True)
            valid = f"valid quantities are {', '.join(QUANTITIES)}"
            raise argparse.ArgumentTypeError(f"unknown quantity {name!r}: {hint or valid}")
    return out


def selection(value: str) -> tuple:
    """'0,3,-1' / '8:12' -> indices and slices (`jaxattn.selection.parse_selection`)."""
    try:
        return parse_selection(value)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# Flags whose value may start with "-" (a negative index: "--layers -2:"), which
# argparse would otherwise read as an option of its own.
SELECTION_FLAGS = (
    "--layers",
    "--heads",
    "--layer",
    "--head",
    "--query-positions",
    "--key-positions",
)
_SELECTION = re.compile(r"-?\d*(:-?\d*)?(,\s*-?\d*(:-?\d*)?)*")


def join_selections(argv: list[str]) -> list[str]:
    """argv with "--layers -2:" (and -1,3 / -3,-1 ...) written "--layers=-2:"."""
    out, i = [], 0
    while i < len(argv):
        flag, value = argv[i], argv[i + 1] if i + 1 < len(argv) else ""
        if flag == "--":  # what follows is positional, whatever it looks like
            return out + argv[i:]
        if (
            flag in SELECTION_FLAGS
            and value.startswith("-")
            and _SELECTION.fullmatch(value)
            and any(c.isdigit() for c in value)
        ):
            out.append(f"{flag}={value}")
            i += 2
        else:
            out.append(flag)
            i += 1
    return out


def _at_least(value: str, least: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"expected a number >= {least}, got {n}")
    return n


def positive(value: str) -> int:
    """An integer >= 1."""
    return _at_least(value, 1)


def non_negative(value: str) -> int:
    """An integer >= 0."""
    return _at_least(value, 0)


def wire_count(least: int):
    """An integer least..MAX_UINT32: a server's limit, which ModelInfo carries as a uint32."""

    def parse(value: str) -> int:
        from jaxattn.wire.codecs import MAX_UINT32

        return at_most(_at_least(value, least), MAX_UINT32, "a server's limit is a uint32")

    return parse


def at_most(n: int, most: int, why: str) -> int:
    """`n`, if it is at most `most`; else the flag's error, saying `why` that is the most."""
    if n > most:
        raise argparse.ArgumentTypeError(f"expected a number <= {most} ({why}), got {n}")
    return n


def read_flag_file(flag: str, path: str) -> bytes:
    """The bytes of the file `flag` names, its errors naming the flag and the file.

    Raises:
      FileNotFoundError, IsADirectoryError: no such file, or a directory (exit 2).
      OSError: another reason it cannot be read (permissions: exit 1), as raised.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{flag} {path} is a directory: name a file in it") from None


def read_token(token_file: str | None) -> str | None:
    """The bearer token from a file, else $JAXATTN_TOKEN, else None.

    Raises:
      FileNotFoundError, IsADirectoryError, OSError: the file cannot be read
        (`read_flag_file`).
      InputError: the file is empty or not UTF-8 text.
    """
    if token_file:
        data = read_flag_file("--token-file", token_file)
        try:  # utf-8-sig: a byte-order mark (Windows editors) is no part of the token
            token = data.decode("utf-8-sig").strip()
        except UnicodeDecodeError:
            raise InputError(
                None, f"token file {token_file} is not UTF-8 text: put the bearer token in it"
            ) from None
        if not token:
            raise InputError(None, f"token file {token_file} is empty: put the bearer token in it")
        return token
    # Stripped as the file is: a secret put into the environment from a file keeps its
    # newline, which no gRPC header carries.
    return os.environ.get("JAXATTN_TOKEN", "").strip() or None


def _finite_float(value: str, positive: bool) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not (x > 0 if positive else x >= 0):
        raise argparse.ArgumentTypeError(
            f"expected a number {'>' if positive else '>='} 0, got {value}"
        )
    if not math.isfinite(x):  # inf: past what a deadline, a wait or a limit can hold
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value}")
    return x


def mebibytes(width: str):
    """A finite number of MiB > 0 for a server's byte limit whose bytes fit its field:
    `width` "int32" (gRPC's int options: a request's size) or "uint64" (ModelInfo's)."""

    def parse(value: str) -> float:
        from jaxattn.wire.codecs import MAX_INT32, MAX_UINT64

        most, why = {
            "int32": (MAX_INT32, "2 GiB: gRPC takes it as a 32-bit int"),
            "uint64": (MAX_UINT64, "ModelInfo carries it as a uint64 of bytes"),
        }[width]
        mib = _finite_float(value, positive=True)
        if int(mib * (1 << 20)) > most:
            raise argparse.ArgumentTypeError(
                f"expected a number of MiB below {(most + 1) / (1 << 20):g} ({why}), got {value}"
            )
        return mib

    return parse


def positive_float(value: str) -> float:
    """A finite number > 0."""
    return _finite_float(value, positive=True)


def non_negative_float(value: str) -> float:
    """A finite number >= 0."""
    return _finite_float(value, positive=False)


def port(value: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {n}")
    return n


# `jaxattn.engine.blockwise.POLICIES`, spelled out: the CLI imports no jax to register
# (tests/test_cli_attention.py checks they agree).
ATTENTION = ("auto", "dense", "blockwise")


def add_source_arguments(
    p: argparse.ArgumentParser, *, timeout: float = 120.0, server: bool = True
) -> None:
    """Where captures come from: a local checkpoint (--model, run as --attention and
    --attention-block say) or a server (--server)."""
    default = "the embedded all-MiniLM-L6-v2" + (" when no --server" if server else "")
    p.add_argument(
        "--model", type=model, metavar=MODEL_METAVAR, help=f"{MODEL_HELP} (default: {default})"
    )
    p.add_argument(
        "--attention",
        choices=ATTENTION,
        default=None,
        help="how the local engine runs attention: blockwise (memory linear in the text's "
        "length, for long inputs; refuses a quantity it cannot compute so), dense (the "
        "whole [H, T, T] maps), or auto (blockwise where it can from 768 tokens with a "
        "map, 512 for statistics alone) "
        "(default auto; docs/performance.md#long-inputs)",
    )
    p.add_argument(
        "--attention-block",
        type=positive,
        default=None,
        metavar="N",
        help="the blockwise path's block of query and key tokens: larger blocks take "
        "fewer steps over a long text (what a GPU favours) and hold H x N^2 x 4 bytes a "
        "block (default 256, measured on the CPU; docs/performance.md#long-inputs)",
    )
    if not server:
        return
    p.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="capture through this gRPC server (comma-separated: round-robin)",
    )
    add_token_argument(p)
    p.add_argument("--tls-ca", metavar="PEM", help="connect to --server with TLS trusting this CA")
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=timeout,
        help=f"seconds per call to --server (default {timeout:g})",
    )


def engine_options(args: argparse.Namespace) -> dict:
    """The `jaxattn.load` options the command's arguments set: {"attention": ...,
    "attention_block": ...} for those given, nothing for the others (the engine's
    defaults)."""
    given = {"attention": args.attention, "attention_block": args.attention_block}
    return {name: value for name, value in given.items() if value is not None}


def engine_flags(args: argparse.Namespace) -> list[str]:
    """The flags of `engine_options` given ("--attention", "--attention-block"): what a
    command refuses by name where no local engine runs (a server, saved captures)."""
    return ["--" + name.replace("_", "-") for name in engine_options(args)]


def add_token_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-file", metavar="FILE", help="bearer token for --server (or $JAXATTN_TOKEN)"
    )


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """What to capture: --what, --layers, --heads and the output --dtype."""
    default = ",".join(DEFAULT_WHAT)
    p.add_argument(
        "--what",
        type=quantity_names,
        default=DEFAULT_WHAT,
        metavar="NAMES",
        help=f"comma-separated quantities, of {', '.join(QUANTITIES)} (default {default}; "
        "docs/reference/quantities.md defines them)",
    )
    add_selection_arguments(p)
    add_position_arguments(p)
    add_dtype_argument(p)


def positions(field: str):
    """An argparse type: '-256:' / '0,5:9' -> the positions of `field`
    (`jaxattn.selection.positions_of`; negative ones from each text's end)."""

    def parse(value: str) -> tuple[int, ...]:
        try:
            return positions_of(value, field)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def add_position_arguments(p: argparse.ArgumentParser) -> None:
    """--query-positions and --key-positions: the maps' rows and keys (default all)."""
    p.add_argument(
        "--query-positions",
        type=positions("query_positions"),
        metavar="SEL",
        help="the query rows the maps (attention, scores, alpha_fx_norm, ...) keep: token "
        "positions of each text, negative ones from its end, ranges with both bounds from "
        "the start or both from the end ('-256:' the last 256 tokens, '0,5:9'; default all)",
    )
    p.add_argument(
        "--key-positions",
        type=positions("key_positions"),
        metavar="SEL",
        help="the key positions (columns) the maps keep, the same way (default all)",
    )


def add_selection_arguments(p, *, used: str = "") -> None:
    """--layers and --heads: indices, negative from the end, ranges (default all)."""
    p.add_argument(
        "--layers",
        type=selection,
        metavar="SEL",
        help=f"layers{used}: indices, negative ones from the end, ranges "
        "(0,3,-1 or 8:12; default all)",
    )
    p.add_argument(
        "--heads", type=selection, metavar="SEL", help=f"heads{used}, the same way (default all)"
    )


def add_dtype_argument(p: argparse.ArgumentParser) -> None:
    """--dtype alone (commands that choose their own quantities)."""
    p.add_argument(
        "--dtype",
        default="float32",
        choices=tuple(OUTPUT_DTYPES),
        help="output dtype (default float32: exact; errors in docs/reference/dtypes.md)",
    )


def add_codec_argument(p: argparse.ArgumentParser, *, used: str = "with --server") -> None:
    p.add_argument(
        "--codec", default="zstd", choices=CODECS, help=f"wire compression {used} (default zstd)"
    )


def add_precision_argument(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """--precision: the compute precision (None: the engine's or server's default)."""
    said = f"default {default}" if default else "default: the model's, highest unless a server says"
    p.add_argument(
        "--precision",
        default=default,
        choices=PRECISIONS,
        help=f"compute precision: highest (exact float32), tf32 or bf16 (faster on "
        f"GPUs/TPUs; errors in docs/reference/dtypes.md) ({said})",
    )


def add_too_long_argument(p: argparse.ArgumentParser) -> None:
    """--too-long {error,truncate,skip}, the one long-text policy."""
    p.add_argument(
        "--too-long",
        choices=TOO_LONG,
        default="error",
        help="a text over the model's maximum length: stop with an error, cut it, "
        "or leave it out (counted either way) (default error)",
    )


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    """--generate N and --ignore-eos: a decoder continues each text before the capture."""
    p.add_argument(
        "--generate",
        metavar="N",
        type=positive,
        default=None,
        help="a decoder with its next-token head (the local model's, or --server's where "
        "the command has --server) first continues each text "
        "by up to N greedily generated tokens; the capture then holds prompt + "
        "continuation, the views mark where the generated tokens start (default: none)",
    )
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="with --generate: always generate N tokens, past the model's EOS tokens",
    )


def add_limit_argument(p: argparse.ArgumentParser, *aliases: str) -> None:
    """--limit N: only the first N examples of the input."""
    p.add_argument(
        "--limit",
        *aliases,
        type=positive,
        metavar="N",
        help="only the first N examples of the input (default all)",
    )


def add_overwrite_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--overwrite", action="store_true", help="replace output files that exist (default: refuse)"
    )


def check_output(path: str | os.PathLike, overwrite: bool, flag: str = "--out") -> Path:
    """`path` as an output file a command may write: not a directory, not under a
    file, and not existing unless `overwrite`. Missing parent directories are made
    when the command writes (`ensure_parent`), so a failing command leaves nothing.

    Raises:
      UsageError: naming the flag, the path and what to do.
    """
    given = os.fspath(path)
    if given.endswith(("/", os.sep)) and not Path(given).is_dir():
        # Path drops the trailing separator: "new/" would be written as a file "new"
        raise UsageError(
            f"{flag} {given} ends in '/', a directory, and names no file: name a file "
            f"(in it, {given}NAME)"
        )
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory: name a file in it")
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, not a directory")
    if path.exists() and not overwrite:
        raise UsageError(f"{flag} {path} exists: pass --overwrite to replace it")
    return path


def ensure_parent(path: str | os.PathLike) -> Path:
    """Make the missing parent directories of an output checked by `check_output`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def opened_example(example: int, n: int) -> int:
    """--example among the `n` examples of a page that opens at it (the compare and
    stats-first pages), negative from the end; out of range, the page's one-line error
    of the flag: '--example 3: index 3 is out of range: the page holds 3 examples ...'."""
    from jaxattn.views.page import opening_example

    try:
        return opening_example(n, example)
    except UsageError as e:  # "example 3: ..." of the flag
        raise UsageError(f"--{e}") from None
