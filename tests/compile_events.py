"""Counting the capture step's XLA compiles by JAX's own monitoring events."""

from __future__ import annotations

import contextlib

import jax


@contextlib.contextmanager
def backend_compiles():
    """The capture step's XLA compiles (persistent-cache loads too) while inside,
    counted by JAX's own monitoring event, not by the engine."""
    seen: list[str] = []

    def listen(event, seconds, fun_name=None, **_):
        if event == "/jax/core/compile/backend_compile_duration" and "_forward" in str(fun_name):
            seen.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
