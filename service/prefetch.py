"""Run a generator a few items ahead of its consumer, in its own thread.

The gRPC sync server sends one message at a time and only then pulls the next
from the handler, and the sync client receives the next message only when
asked: on both sides prefetching overlaps the transport with encoding or
decoding (copies, CRC-32 and the codecs release the GIL for large buffers).
The queue is bounded: at most `depth` messages wait per stream.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator

from jaxattn.wire.codec_pool import name_os_thread

_POLL_S = 0.05
# The prefetching threads' name, in Python and for the system (`name_os_thread`).
THREAD_NAME = "jaxattn-encode"


def prefetch(items: Iterator, depth: int = 2) -> Iterator:
    """Yield what `items` yields, computed up to `depth` items ahead in a thread.

    An exception raised by `items` is re-raised here, in order. Closing this
    iterator stops the thread and closes `items`.

    Each side sleeps only when it must (nothing ready; `depth` items waiting), and the
    producer, once asleep on a full queue, is woken when the consumer has taken them
    all, not at each one (a wake-up holds the interpreter lock while the woken thread
    takes the core: one a message where the sends are the slower side, half as many now).
    """
    ready: collections.deque = collections.deque()
    lock = threading.Lock()  # `ready` and who sleeps
    has_item, has_room = threading.Lock(), threading.Lock()  # released to wake the sleeper
    has_item.acquire()
    has_room.acquire()
    asleep = [False, False]  # the consumer, the producer
    stop = threading.Event()

    def put(entry) -> bool:
        while True:
            with lock:
                if len(ready) < depth:
                    ready.append(entry)
                    wake, asleep[0] = asleep[0], False
                    break
                asleep[1] = True
            while not has_room.acquire(timeout=_POLL_S):  # woken; or stopped
                if stop.is_set():
                    return False
        if wake:
            has_item.release()
        return True

    def produce() -> None:
        name_os_thread(THREAD_NAME)
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as e:  # handed to the consumer, raised there
            put((False, e))
        finally:
            close = getattr(items, "close", None)  # generators; a gRPC call has cancel()
            if close is not None:
                close()

    threading.Thread(target=produce, name=THREAD_NAME, daemon=True).start()
    try:
        while True:
            with lock:
                sleep = not ready
                if sleep:
                    asleep[0] = True  # each sleep answered by one release, in `put`
                else:
                    ok, item = ready.popleft()
                    wake = asleep[1] and not ready  # the producer refills it all
                    if wake:
                        asleep[1] = False
            if sleep:
                has_item.acquire()
                continue
            if wake:
                has_room.release()
            if ok:
                yield item
            elif item is None:
                return
            else:
                raise item
    finally:
        stop.set()
