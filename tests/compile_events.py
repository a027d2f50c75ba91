"""Counting the engine's XLA compiles by JAX's own monitoring events."""

from __future__ import annotations

import contextlib

import jax

# The programs of a generation's steps (`jaxattn.engine.kv_cache`): prefill, step, write.
GENERATION = ("_prefill_fn", "_step_fn", "_write", "_grow", "_insert")


BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
TRACE = "/jax/core/compile/jaxpr_trace_duration"


def backend_compiles(names=("_forward",)):
    """The XLA compiles (persistent-cache loads too) of the programs whose names contain
    one of `names` (the capture step's; `GENERATION`: a generation's) while inside,
    counted by JAX's own monitoring event, not by the engine."""
    return program_events(BACKEND_COMPILE, names)


def traces(names=("_forward",)):
    """The traces of the functions whose names contain one of `names` while inside (JAX's
    own event: a program the program cache loads is not traced)."""
    return program_events(TRACE, names)


@contextlib.contextmanager
def program_events(kind: str, names):
    """The names of the programs whose `kind` event (a jax.monitoring duration) JAX records
    while inside, of those whose names contain one of `names`."""
    seen: list[str] = []

    def listen(event, seconds, fun_name=None, **_):
        name = str(fun_name)
        if event == kind and any(n in name for n in names):
            seen.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
