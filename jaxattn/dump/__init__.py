"""Corpus dump jobs: `jaxattn dump` as a library.

    import jaxattn
    from jaxattn.dump import DumpOptions, run_dump

    engine = jaxattn.load(model_dir)
    options = DumpOptions(input=Path("corpus.jsonl"), out="corpus.zarr",
                          what=("attention",), too_long="truncate")
    result = run_dump(engine, options, model_dir=model_dir)   # this process's shards
    store = jaxattn.open_store("corpus.zarr")

Modules: `sharding` (records -> shards -> processes; the records come from
`jaxattn.inputs`), `fingerprint` (model identity), `distributed`
(jax.distributed), `shard` (one shard's work), `job` (a process's job: resume,
progress, summary), `counts` (what a job did).
"""

from jaxattn.dump.job import DumpOptions, DumpResult, run_dump, store_status

__all__ = ["DumpOptions", "DumpResult", "run_dump", "store_status"]
