"""The arguments several commands share, spelled and parsed one way.

Choices come from the tables (`jaxattn.dtypes.OUTPUT_DTYPES`,
`jaxattn.wire.CODECS`), so a new dtype or codec reaches every command.

    add_source_arguments(p)     --server --model --token-file --tls-ca --timeout
    add_spec_arguments(p)       --what --layers --heads --dtype
    add_dtype_argument(p)       --dtype
    add_codec_argument(p)       --codec
    add_token_argument(p)       --token-file
    add_precision_argument(p)   --precision
    add_truncate_argument(p)    --truncate
"""

from __future__ import annotations

import argparse
import os

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.spec import DEFAULT_WHAT, PRECISIONS
from jaxattn.wire.codecs import CODECS


def names(value: str) -> tuple[str, ...]:
    """'attention, queries' -> ('attention', 'queries')."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


def ints(value: str) -> tuple[int, ...]:
    """'0,3,5' -> (0, 3, 5)."""
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        msg = f"expected comma-separated integers, got {value!r}"
        raise argparse.ArgumentTypeError(msg) from None


def read_token(token_file: str | None) -> str | None:
    """The bearer token from a file, else $JAXATTN_TOKEN, else None.

    Raises:
      ValueError: the file is empty.
    """
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {token_file} is empty")
        return token
    return os.environ.get("JAXATTN_TOKEN") or None


def add_source_arguments(
    p: argparse.ArgumentParser, *, timeout: float = 120.0, server: bool = True
) -> None:
    """Where captures come from: a local checkpoint (--model) or a server (--server)."""
    p.add_argument("--model", metavar="PATH",
                   help="local checkpoint directory (default: the embedded all-MiniLM-L6-v2)"
                   + (" when no --server" if server else ""))  # fmt: skip
    if not server:
        return
    p.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="capture through this gRPC server (comma-separated: round-robin)",
    )
    add_token_argument(p)
    p.add_argument("--tls-ca", metavar="PEM", help="connect to --server with TLS trusting this CA")
    p.add_argument("--timeout", type=float, default=timeout,
                   help=f"seconds per call to --server (default {timeout:g})")  # fmt: skip


def add_token_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--token-file", metavar="FILE",
                   help="bearer token for --server (or $JAXATTN_TOKEN)")  # fmt: skip


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """What to capture: --what, --layers, --heads and the output --dtype."""
    default = ",".join(DEFAULT_WHAT)
    p.add_argument("--what", type=names, default=DEFAULT_WHAT,
                   help=f"comma-separated quantities (default {default})")  # fmt: skip
    p.add_argument("--layers", type=ints, help="comma-separated layer indices (default all)")
    p.add_argument("--heads", type=ints, help="comma-separated head indices (default all)")
    add_dtype_argument(p)


def add_dtype_argument(p: argparse.ArgumentParser) -> None:
    """--dtype alone (commands that choose their own quantities)."""
    p.add_argument(
        "--dtype",
        default="float32",
        choices=tuple(OUTPUT_DTYPES),
        help="output dtype (default float32: exact; see the README's table)",
    )


def add_codec_argument(p: argparse.ArgumentParser, *, used: str = "with --server") -> None:
    p.add_argument("--codec", default="zstd", choices=CODECS,
                   help=f"wire compression {used} (default zstd)")  # fmt: skip


def add_precision_argument(p: argparse.ArgumentParser, *, default: str | None = None) -> None:
    """--precision: the compute precision (None: the engine's or server's default)."""
    said = f"default {default}" if default else "default: the model's, highest unless a server says"
    p.add_argument("--precision", default=default, choices=PRECISIONS,
                   help=f"compute precision: highest (exact float32), tf32 or bf16 (faster on "
                   f"GPUs/TPUs; errors in the README) ({said})")  # fmt: skip


def add_truncate_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--truncate", action="store_true",
                   help="cut texts over the model's limit instead of failing")  # fmt: skip
