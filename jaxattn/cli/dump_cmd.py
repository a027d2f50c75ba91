"""`jaxattn dump INPUT --out STORE`: a corpus's attention into a zarr v3 store.

Runs data parallel over every local device, and over hosts when started as
several processes (`jax.distributed`: --coordinator/--num-processes/
--process-id, $JAX_COORDINATOR_ADDRESS/$JAX_NUM_PROCESSES/$JAX_PROCESS_ID, or
JAX's cluster auto-detection). Rerunning the same command resumes a killed
job; --overwrite deletes the store and starts it over. See STORE.md for the store
layout.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jaxattn.cli.args import (
    add_generate_arguments,
    add_limit_argument,
    add_precision_argument,
    add_source_arguments,
    add_spec_arguments,
    add_too_long_argument,
    engine_options,
    positive,
)
from jaxattn.errors import UsageError
from jaxattn.inputs import FORMATS, ON_ERROR


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
        help="store directory (or a TensorStore kvstore URL such as gs://...): new, empty, or "
        "a store of the same command to resume (required)",
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
        help="an unreadable record (or a too-long one under --too-long error): stop the "
        "job, or report and skip it (default stop)",
    )
    add_too_long_argument(p)
    add_generate_arguments(p)
    add_limit_argument(p)
    p.add_argument(
        "--shard-size",
        type=positive,
        default=1024,
        metavar="N",
        help="input records per shard: the unit of work and of resumption (default 1024)",
    )
    p.add_argument(
        "--chunk-bytes",
        type=positive,
        default=1 << 20,
        metavar="B",
        help="uncompressed bytes per zarr chunk (default 1 MiB; at least 4 KiB)",
    )
    g = p.add_argument_group("many hosts (jax.distributed)")
    g.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="process 0's coordinator address (default: $JAX_COORDINATOR_ADDRESS, else "
        "JAX's cluster detection)",
    )
    g.add_argument(
        "--num-processes",
        type=positive,
        metavar="N",
        help="processes in the job (default: $JAX_NUM_PROCESSES, else 1)",
    )
    g.add_argument(
        "--process-id",
        type=int,
        metavar="I",
        help="this process, 0-based (default: $JAX_PROCESS_ID, else 0)",
    )
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="auto: initialise jax.distributed when the flags or environment give a "
        "coordinator or JAX detects a cluster (TPU pod, SLURM, Open MPI) (default auto)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the jaxattn store at STORE and start it over (default: resume it, or "
        "refuse another command's); a path that is not a jaxattn store is refused",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar; the summary line stays (default off)"
    )
    p.set_defaults(func=_run, server=None)  # local engines only (`check_generate` reads it)


def _run(args: argparse.Namespace) -> int:
    from jaxattn.cli.generated import check_generate
    from jaxattn.dump import distributed
    from jaxattn.dump.job import DumpOptions, finished_dump, run_dump, store_status
    from jaxattn.dump.sharding import check_has_examples
    from jaxattn.store.location import check_output, hold_writer_lock

    # Cheap checks before any process joins the job, loads a model or creates the store.
    check_generate(args)
    if args.input.is_dir():
        raise IsADirectoryError(f"input {args.input} is a directory: name a file in it")
    if str(args.input) == "-" or (args.input.exists() and not args.input.is_file()):
        raise UsageError(
            f"dump reads INPUT {args.input} twice (a fingerprint, then the texts, "
            "again on a resume): it needs a regular file, not standard input or "
            "a pipe; write the texts to a file first"
        )
    if not args.input.is_file():
        raise FileNotFoundError(f"no input file {args.input}")
    check_has_examples(args.input, args.input_format)
    check_output(args.out, args.overwrite)
    process = distributed.initialize(
        args.coordinator, args.num_processes, args.process_id, mode=args.distributed
    )
    from jaxattn.checkpoints.loading import model_name, resolve_model

    try:  # from here on every path leaves the job (`distributed.shutdown`)
        # another dump writing --out: refused before the model loads (run_dump locks it)
        busy = hold_writer_lock(args.out, process.count, create=False)
        if busy is not None:
            os.close(busy)
        model = resolve_model(args.model)  # a Hub model downloaded, as jaxattn.load does
        model_dir = model.path
        options = DumpOptions(
            input=args.input,
            out=args.out,
            what=args.what,
            layers=args.layers,
            heads=args.heads,
            dtype=args.dtype,
            precision=args.precision,
            query_positions=args.query_positions,
            key_positions=args.key_positions,
            input_format=args.input_format,
            shard_size=args.shard_size,
            on_error=args.on_error,
            too_long=args.too_long,
            chunk_bytes=args.chunk_bytes,
            quiet=args.quiet,
            limit=args.limit,
            generate=args.generate,
            stop_at_eos=not args.ignore_eos,
            overwrite=args.overwrite,
        )
        # a store this command finished: said as a resumed job says it, without the model
        name = model_name(model)  # the name the loaded model would report
        if finished_dump(options, model_dir=model_dir, model_name=name, process=process) is None:
            import jaxattn

            engine = jaxattn.load(args.model, **engine_options(args))
            run_dump(engine, options, model_dir=model_dir, process=process)
    finally:  # on every path, a refusal before the model loads too: the job's barrier
        distributed.shutdown(process)  # waits for every process: the store is then complete
    if process.index == 0 and process.count > 1:
        import sys

        print(store_status(args.out), file=sys.stderr)
    return 0
