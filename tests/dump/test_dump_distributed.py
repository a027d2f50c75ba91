"""When `jaxattn dump` joins a jax.distributed job: flags, environment, JAX's detection."""

from __future__ import annotations

import jax
import pytest

from jaxattn.dump import distributed
from jaxattn.errors import UsageError


@pytest.fixture
def calls(monkeypatch):
    """Record jax.distributed.initialize calls instead of joining a job."""
    seen = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: seen.append(kw))
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(distributed, "cluster_detected", lambda: False)
    return seen


def test_flags(calls):
    process = distributed.initialize("10.0.0.1:1234", 2, 1)
    assert calls == [dict(coordinator_address="10.0.0.1:1234", num_processes=2, process_id=1)]
    assert process == distributed.Process(1, 2, True) and process.label == "p1/2"


def test_environment(calls, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "h:9")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    distributed.initialize()
    assert calls == [dict(coordinator_address="h:9", num_processes=2, process_id=1)]


def test_single_process_unless_asked_or_detected(calls, monkeypatch):
    assert distributed.initialize() == distributed.Process() and calls == []
    assert distributed.initialize("h:9", 2, 0, mode="off") == distributed.Process()
    assert calls == []
    monkeypatch.setattr(distributed, "cluster_detected", lambda: True)  # e.g. a TPU pod
    distributed.initialize()
    assert calls == [dict(coordinator_address=None, num_processes=None, process_id=None)]


def test_bad_values(calls, monkeypatch):
    monkeypatch.setenv("JAX_PROCESS_ID", "one")
    with pytest.raises(UsageError, match=r"\$JAX_PROCESS_ID must be an integer"):
        distributed.initialize()
    with pytest.raises(UsageError, match="unknown distributed mode"):
        distributed.initialize(mode="maybe")


def test_a_job_the_flags_do_not_describe_is_named_by_flag(calls, monkeypatch):
    from jaxattn.errors import JaxattnError, UsageError

    with pytest.raises(UsageError, match="needs --coordinator, --num-processes, --process-id"):
        distributed.initialize(mode="on")
    with pytest.raises(UsageError, match="needs --coordinator \\(or their"):
        distributed.initialize(None, 2, 1)
    with pytest.raises(UsageError, match="--coordinator 'nonsense': expected HOST:PORT"):
        distributed.initialize("nonsense", 2, 1)
    with pytest.raises(
        UsageError, match="--process-id 5 is not one of the job's --num-processes 2 \\(0..1\\)"
    ):
        distributed.initialize("h:9", 2, 5)
    assert calls == []

    def refuse(**kw):
        raise ValueError("Number of processes must be defined.")

    monkeypatch.setattr(jax.distributed, "initialize", refuse)
    with pytest.raises(
        JaxattnError,
        match="cannot join the job \\(--coordinator h:9, "
        "--num-processes 2, --process-id 0\\): Number of processes",
    ):
        distributed.initialize("h:9", 2, 0)
