"""`jaxattn convert HF_DIR OUT_DIR`: HF checkpoint -> orbax jaxattn checkpoint."""

from __future__ import annotations

from jaxattn.config import FAMILIES


def register(sub) -> None:
    families = ", ".join(FAMILIES)
    p = sub.add_parser(
        "convert",
        help=f"convert a local HF checkpoint ({families}) to a jaxattn (orbax) one",
        description="Convert a local Hugging Face checkpoint directory of a family jaxattn "
        f"reads ({families}) into an orbax checkpoint directory that "
        "`jaxattn.load(OUT_DIR)` reads back identically.",
    )
    p.add_argument("hf_dir", help="directory with config.json, weights and tokenizer files")
    p.add_argument(
        "out_dir",
        help="directory to write: absent (created) or empty, unless --overwrite; it appears "
        "only once complete",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT_DIR if it exists and is not empty (once the new one is complete)",
    )
    p.add_argument(
        "--ignore-config-field",
        action="append",
        default=[],
        metavar="FIELD",
        help="a config.json field you vouch does not change the computation (repeatable)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jaxattn.checkpoints import convert_checkpoint

    out = convert_checkpoint(
        args.hf_dir,
        args.out_dir,
        ignore_config_fields=tuple(args.ignore_config_field),
        overwrite=args.overwrite,
    )
    print(f"wrote {out}")
    return 0
