"""Run a generator a few items ahead of its consumer, in its own thread.

The gRPC sync server sends one message at a time and only then pulls the next
from the handler, and the sync client receives the next message only when
asked: on both sides prefetching overlaps the transport with encoding or
decoding (copies, CRC-32 and the codecs release the GIL for large buffers).
The queue is bounded: at most `depth` messages wait per stream.
"""

from __future__ import annotations

import queue
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
    """
    ready: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

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
            ok, item = ready.get()
            if ok:
                yield item
            elif item is None:
                return
            else:
                raise item
    finally:
        stop.set()
