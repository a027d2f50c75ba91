"""The codec pool's own threads and tasks (`codec_pool._Threads`, `_Task`): a task
dropped while one waits for it, its slot returned once on every path, work queued when
the pool stops done first, and the interpreter's exit waiting for queued work."""

from __future__ import annotations

import concurrent.futures
import gc
import subprocess
import sys
import threading
import time
import weakref

import pytest

from jaxattn.wire import codec_pool


@pytest.fixture
def pool():
    """A pool of its own (one thread), stopped after the test."""
    shared = codec_pool._Pool(1)
    yield shared
    shared.executor.shutdown()


def test_a_task_dropped_while_one_waits_for_it_wakes_the_waiter(pool):
    gate, calls = threading.Event(), []
    busy = pool.executor.submit(gate.wait, 30)  # the only thread held
    queued = pool.executor.submit(lambda: "ran")
    queued.then(lambda: calls.append("then"))
    raised = []

    def wait():
        try:
            queued.result()
        except concurrent.futures.CancelledError:
            raised.append("cancelled")

    waiter = threading.Thread(target=wait, daemon=True)  # (a hang: not the tests' exit too)
    waiter.start()
    for _ in range(3000):  # until it waits in result() (not after the drop: no wait then)
        frame = sys._current_frames().get(waiter.ident)
        if frame is not None and frame.f_code is codec_pool._Task.result.__code__:
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the waiter never waited")
    assert queued.cancel() and queued.cancelled() and queued.done()
    waiter.join(30)
    assert raised == ["cancelled"] and calls == ["then"]  # the callback once, at the drop
    assert queued.cancel()  # dropped already: still dropped, no second callback
    assert calls == ["then"]
    gate.set()
    assert busy.result() is True
    assert not busy.cancel()  # done: not dropped


def test_then_runs_once_when_the_work_is_done_or_at_once_where_it_is(pool):
    gate, calls = threading.Event(), []
    task = pool.executor.submit(gate.wait, 30)
    task.then(lambda: calls.append("later"))
    assert calls == []
    gate.set()
    assert task.result() is True
    pool.executor.submit(lambda: None).result()  # the thread has moved on: `then` ran
    assert calls == ["later"]
    task.then(lambda: calls.append("now"))
    assert calls == ["later", "now"]


def test_an_exception_is_raised_by_result_and_the_thread_goes_on(pool):
    def broken():
        raise KeyError("piece 2")

    task = pool.executor.submit(broken)
    with pytest.raises(KeyError, match="piece 2"):
        task.result()
    assert pool.executor.submit(lambda: 7).result() == 7


def test_after_shutdown_work_is_refused_and_done_by_the_caller_its_slot_back(monkeypatch):
    shared = codec_pool._Pool(1)
    queued = [shared.executor.submit(lambda k=k: k) for k in range(3)]
    shared.executor.shutdown()  # the work queued before it done first
    assert [t.result() for t in queued] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="shut down"):
        shared.executor.submit(lambda: None)
    monkeypatch.setattr(codec_pool, "_pool", shared)
    here = threading.current_thread().name
    job = codec_pool.start(lambda: threading.current_thread().name, size=1, least=0)
    assert job.done() and job.result() == here
    taken = 0
    while shared.slots.take():
        taken += 1
    assert taken == 2  # every slot free: the refused offer gave its slot back


def test_the_interpreter_exits_once_the_queued_work_is_done():
    script = """if True:
        import sys, threading
        sys.path.insert(0, sys.argv[1])
        from jaxattn.wire import codec_pool as cp
        gate = threading.Event()
        first = cp.start(gate.wait, 30, size=1, least=0)  # holds the pool's one thread
        queued = cp.start(lambda: print("queued work done", flush=True), size=1, least=0)
        assert not queued.done()  # behind the first, on the pool (its second slot)
        opener = threading.Timer(0.2, gate.set)
        opener.daemon = True  # the exit does not wait for it: only for the pool's work
        opener.start()
        print("main ends", flush=True)
    """
    env = {"JAXATTN_CODEC_THREADS": "1", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", script, str(__import__("pathlib").Path(__file__).parents[2])],
        timeout=60,
        capture_output=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split() == ["main", "ends", "queued", "work", "done"]


def test_a_failing_callback_is_logged_and_the_thread_goes_on(pool, caplog):
    gate = threading.Event()
    task = pool.executor.submit(gate.wait, 30)
    task.then(lambda: 1 / 0)  # a bug in a callback, on the pool's thread
    gate.set()
    after, ran = pool.executor.submit(lambda: "still here"), threading.Event()
    after.then(ran.set)
    assert ran.wait(30) and after.result() == "still here"  # (a dead thread: never run)
    assert "callback failed" in caplog.text


def test_a_forked_child_exits_though_the_parent_pool_lock_was_held_at_the_fork():
    """The parent's `_stop` (registered for the interpreter's exit) is inherited by a
    forked child, with the pool's lock as it was at the fork: held there by a thread the
    child does not have, the child's normal exit must not wait on it."""
    script = """if True:
        import os, sys, threading, time
        sys.path.insert(0, sys.argv[1])
        from jaxattn.wire import codec_pool as cp
        cp.start(lambda: None, size=1, least=0).result()  # the parent's pool started
        held, go = threading.Event(), threading.Event()
        def hold():  # as a pool thread between a task's states: the pool's lock held
            with cp.pool().executor._lock:
                held.set()
                go.wait(30)
        threading.Thread(target=hold).start()
        held.wait(30)
        pid = os.fork()
        if pid == 0:
            sys.exit(3)  # a normal exit: threading's exit callbacks run
        go.set()
        for _ in range(200):
            got, status = os.waitpid(pid, os.WNOHANG)
            if got:
                sys.exit(os.waitstatus_to_exitcode(status))
            time.sleep(0.05)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        sys.exit("the child hung at its exit")
    """
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",  # fork with threads
            "-c",
            script,
            str(__import__("pathlib").Path(__file__).parents[2]),
        ],
        timeout=60,
        capture_output=True,
        env={"JAXATTN_CODEC_THREADS": "1", "PATH": ""},
    )
    assert done.returncode == 3, done.stderr.decode()[-2000:]


def test_a_failed_task_once_dropped_lets_go_of_what_its_work_held_without_a_gc(pool):
    """The error's traceback holds the frames it passed (the pool thread's and the
    waiter's): neither may hold the task, else the task, its error and the work's data
    live on in a cycle until the cyclic gc runs."""

    class Data:  # a chunk's data, as the work's frame holds it
        pass

    def work(data):
        raise ValueError("a bad chunk")

    data = Data()
    held = weakref.ref(data)
    gc.disable()
    try:
        task = pool.executor.submit(work, data)
        del data
        try:
            task.result()
        except ValueError:
            pass
        else:
            raise AssertionError("no error raised")
        del task
        pool.executor.submit(lambda: None).result()  # the thread has left the failed task
        assert held() is None
    finally:
        gc.enable()


def test_a_pool_shut_down_before_its_first_work_starts_no_threads():
    def codec_threads():
        return sum(t.name.startswith(codec_pool.THREAD_NAME) for t in threading.enumerate())

    before, shared = codec_threads(), codec_pool._Pool(2)
    shared.executor.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        shared.executor.submit(lambda: None)
    assert codec_threads() == before  # none started (they would wait until the exit)


def test_a_pool_whose_threads_cannot_start_registers_its_exit_stop_once(monkeypatch):
    """Threads refused (a container's pids limit: RuntimeError "can't start new thread"):
    each offer done by its caller, its slot back, and the pool's stop registered for the
    interpreter's exit once, not once an offer (a list growing a piece at a time)."""

    def refused(self):
        raise RuntimeError("can't start new thread")

    registered = []
    monkeypatch.setattr(threading.Thread, "start", refused)
    monkeypatch.setattr(threading, "_register_atexit", registered.append)
    shared = codec_pool._Pool(2)
    monkeypatch.setattr(codec_pool, "_pool", shared)
    here = threading.current_thread().name
    for _ in range(5):
        job = codec_pool.start(lambda: threading.current_thread().name, size=1, least=0)
        assert job.done() and job.result() == here
    assert len(registered) == 1
    taken = 0
    while shared.slots.take():
        taken += 1
    assert taken == 4  # every slot back
