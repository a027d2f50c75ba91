"""`jaxattn dump INPUT --out STORE`: a corpus's attention into a zarr v3 store.

Runs data parallel over every local device, and over hosts when started as
several processes (`jax.distributed`: --coordinator/--num-processes/
--process-id, $JAX_COORDINATOR_ADDRESS/$JAX_NUM_PROCESSES/$JAX_PROCESS_ID, or
JAX's cluster auto-detection). Rerunning the same command resumes a killed
job. See STORE.md for the store layout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jaxattn.cli.args import add_precision_argument, add_source_arguments, add_spec_arguments
from jaxattn.inputs import FORMATS, ON_ERROR, TOO_LONG


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dump",
        help="write a corpus's attention to a sharded, resumable zarr store",
        description="Capture every example of INPUT and write it to STORE (zarr v3 through "
        "TensorStore; read it back with jaxattn.open_store). Data parallel over local devices "
        "and, with jax.distributed, over hosts; progress is committed per shard, and the same "
        "command resumes a killed job.",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        type=Path,
        help="text (one example per line; pairs 'A ||| B' or A<TAB>B), JSONL "
        '("text", optional "text_b", "id") or CoNLL-U',
    )
    p.add_argument(
        "--out",
        metavar="STORE",
        required=True,
        help="store directory (or a TensorStore kvstore URL such as gs://...)",
    )
    p.add_argument(
        "--format",
        dest="input_format",
        choices=FORMATS,
        help="input format (default: from the suffix or the first line)",
    )
    add_source_arguments(p, server=False)
    add_spec_arguments(p)
    add_precision_argument(p, default="highest")
    p.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="stop",
        help="an unreadable record: stop the job, or report and skip it (default stop)",
    )
    p.add_argument(
        "--too-long",
        choices=TOO_LONG,
        default="error",
        help="an example over the model's maximum length: cut it, skip it, or treat "
        "it as a bad record (default error)",
    )
    p.add_argument(
        "--shard-size",
        type=int,
        default=1024,
        metavar="N",
        help="input records per shard: the unit of work and of resumption (default 1024)",
    )
    p.add_argument(
        "--chunk-bytes",
        type=int,
        default=1 << 20,
        metavar="B",
        help="uncompressed bytes per zarr chunk (default 1 MiB)",
    )
    g = p.add_argument_group("many hosts (jax.distributed)")
    g.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="process 0's coordinator address ($JAX_COORDINATOR_ADDRESS)",
    )
    g.add_argument(
        "--num-processes", type=int, metavar="N", help="processes in the job ($JAX_NUM_PROCESSES)"
    )
    g.add_argument(
        "--process-id", type=int, metavar="I", help="this process, 0-based ($JAX_PROCESS_ID)"
    )
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="auto: initialise jax.distributed when the flags or environment give a "
        "coordinator or JAX detects a cluster (TPU pod, SLURM, Open MPI) (default auto)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from jaxattn.dump import distributed
    from jaxattn.dump.job import DumpOptions, run_dump, store_status

    # Cheap checks before any process joins the job or loads a model.
    if not args.input.is_file():
        raise FileNotFoundError(f"no input file {args.input}")
    if args.shard_size < 1:
        raise ValueError("--shard-size must be at least 1")
    process = distributed.initialize(
        args.coordinator, args.num_processes, args.process_id, mode=args.distributed
    )
    import jaxattn
    from jaxattn.checkpoints import default_model_dir

    model_dir = Path(args.model) if args.model else default_model_dir()
    engine = jaxattn.load(args.model)
    options = DumpOptions(
        input=args.input,
        out=args.out,
        what=args.what,
        layers=args.layers,
        heads=args.heads,
        dtype=args.dtype,
        precision=args.precision,
        input_format=args.input_format,
        shard_size=args.shard_size,
        on_error=args.on_error,
        too_long=args.too_long,
        chunk_bytes=args.chunk_bytes,
        quiet=args.quiet,
    )
    try:
        run_dump(engine, options, model_dir=model_dir, process=process)
    finally:
        distributed.shutdown(process)  # waits for every process: the store is then complete
    if process.index == 0 and process.count > 1:
        import sys

        print(store_status(args.out), file=sys.stderr)
    return 0
