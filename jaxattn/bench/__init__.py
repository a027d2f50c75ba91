"""Benchmarks and the load test, as a library (`jaxattn bench`, `jaxattn loadtest`).

Not part of the client: they need an in-process engine for the reference
answers. `benchmarks/` at the repository root holds the scripts that record
the figures in BENCHMARKS.md.

Modules: `capture` (capture vs transformers' eager attention), `copy_rate`
(the host copy bound it is compared with), `sentences` (the
benchmarks' sentences, through `jaxattn.inputs`), `load_generator` (many concurrent
clients, every answer checked), `expect` (what a right answer is), `mix` (the load
test's request mix and driver), `fault_proxy` (a TCP proxy with latency, jitter,
resets, stalls and partitions) and `fault_network` (network namespaces with loss and
bandwidth limits from nftables and tc: the load test across a faulty network);
`synthetic` (random-weight base-size checkpoints of every family); `device_trace`
(a `jax.profiler` trace's device time: kernels, copies and their overlap); the soak of the
service: `soak` (replicas restarted under open-loop load), `soak_options` (its knobs),
`soak_replicas` (its servers, stopped and started again), `soak_client` and
`soak_vanishers` (clients SIGKILLed mid-call), `proc_sampler` (each process's RSS, file
descriptors and threads, every second), `soak_report` (its verdict) and `svg_series`
(its line charts).
"""

from jaxattn.bench.capture import format_result, random_bert_base, run, synthetic_texts
from jaxattn.bench.sentences import read_sentences

__all__ = ["format_result", "random_bert_base", "read_sentences", "run", "synthetic_texts"]
