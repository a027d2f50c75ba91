"""A TCP fault proxy: latency, jitter, resets, stalls and partitions between client and server.

    from jaxattn.bench.fault_proxy import FaultProxy, Faults, Leg
    faults = Faults(up=Leg(0.02, 0.01), down=Leg(0.02, 0.01), reset_after=(1 << 20, 8 << 20))
    with FaultProxy("10.77.0.2:50051", faults) as proxy:   # listens on 127.0.0.1, a free port
        ... AttentionClient(proxy.address) ...
        proxy.partition(5.0)                               # nothing crosses for 5 s

    python -m jaxattn.bench.fault_proxy --target HOST:PORT --delay-ms 20 --jitter-ms 10 ...

What the kernel here cannot do (it has no `netem`), in user space. Each accepted
connection gets its own connection to the target and one pump per direction
(client -> server "up", server -> client "down"): a reader stamps each chunk with
its delivery time and a writer delivers it then, so a delay costs latency, not
throughput (at most `QUEUE_CHUNKS` chunks wait per direction; then the reader
stops and TCP's flow control holds the sender). The faults:

* **delay, jitter** (per direction, `Leg`): each chunk waits delay +- jitter
  (uniform), never less than the chunk before it: TCP keeps its bytes in order.
* **reset** (`reset_after=(lo, hi)` bytes): once a connection has carried a
  number of bytes drawn from [lo, hi] (both directions), both its sockets are
  closed with SO_LINGER 0, so each peer sees a TCP reset (ECONNRESET), as when a
  middlebox or a host drops a connection. A reset from either peer is passed on
  to the other the same way.
* **stall** (`stall_after=(lo, hi)` bytes, `stall_s`): after that many bytes the
  connection forwards nothing for `stall_s` seconds, both ways, then goes on
  with a new threshold drawn. No byte is lost.
* **partition** (`partition(seconds)`): for that long nothing crosses on any
  connection, and new connections are accepted but not connected to the target
  until it ends. Bytes are held, not thrown away: TCP retransmits what a real
  partition drops once it heals, and a proxy that discarded bytes inside a
  stream would corrupt it, which no network does to TCP. (Bytes already handed
  to the kernel when the partition starts still go out: at most a socket buffer.)

Faults apply while the proxy is *armed* (the default; `armed=False` starts it
calm, `arm()` arms it), so a load test can warm up before them. The counts of
what happened are `stats` (connections, resets, stalls, partitions, bytes_up,
bytes_down); `wait_for(name, n)` blocks until a count reaches n. The command
line form (`main`) prints `listening on HOST:PORT`, arms on SIGUSR1 (printing
`armed`), starts a partition of `--partition-s` on SIGUSR2 (printing `partition
for S s`) and prints its stats as JSON at SIGTERM.
The harness that puts it between network namespaces is
`jaxattn.bench.fault_network`; the tests are tests/reliability/test_rel_fault_proxy.py.
Stdlib only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import signal
import socket
import struct
import sys
import threading

CHUNK_BYTES = 65536
QUEUE_CHUNKS = 32
_EOF = None  # what a reader queues at the end of its side's stream


@dataclasses.dataclass(frozen=True)
class Leg:
    """One direction's latency: each chunk waits `delay_s` +- `jitter_s` (uniform)."""

    delay_s: float = 0.0
    jitter_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Faults:
    """What the proxy does to each connection (see the module docstring).

    Attributes:
      up, down: latency client -> server and server -> client.
      reset_after: reset a connection after a number of bytes drawn from [lo, hi].
      stall_after: stall a connection after a number of bytes drawn from [lo, hi],
        for `stall_s` seconds, again after each new draw.
      seed: of the draws (per connection, in the order connections arrive).
    """

    up: Leg = Leg()
    down: Leg = Leg()
    reset_after: tuple[int, int] | None = None
    stall_after: tuple[int, int] | None = None
    stall_s: float = 0.0
    seed: int = 0


def _host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def _draw(rng: random.Random, bounds: tuple[int, int] | None) -> float:
    return float("inf") if bounds is None else rng.randint(*bounds)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close a connection so its peer sees a TCP reset (RST), not an orderly FIN."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Connection:
    """One proxied connection: both writers, its byte count and its fault thresholds."""

    def __init__(self, proxy: FaultProxy, client_w, upstream_w):
        self.proxy = proxy
        self.writers = (client_w, upstream_w)
        self.rng = random.Random(proxy.rng.random())
        self.carried = 0
        self.reset_at = _draw(self.rng, proxy.faults.reset_after)
        self.stall_at = _draw(self.rng, proxy.faults.stall_after)
        self.stalled_until = 0.0
        self.done = False

    def reset(self, counted: bool = True) -> None:
        if not self.done:
            self.done = True
            for w in self.writers:
                _reset(w)
            if counted:
                self.proxy._count("resets")

    def delivered(self, n: int, now: float) -> None:
        """Count `n` bytes delivered; trip a reset or a stall whose threshold they cross."""
        self.carried += n
        if not self.proxy.armed:  # thresholds count the bytes carried while armed
            self.reset_at += n
            self.stall_at += n
            return
        if self.carried >= self.reset_at:
            self.reset()
        elif self.carried >= self.stall_at:
            self.stalled_until = now + self.proxy.faults.stall_s
            self.stall_at = self.carried + _draw(self.rng, self.proxy.faults.stall_after)
            self.proxy._count("stalls")


class FaultProxy:
    """A TCP proxy to `target` ("host:port") with `faults`; see the module docstring."""

    def __init__(
        self, target: str, faults: Faults = Faults(), listen: str = "127.0.0.1:0", armed=True
    ):
        self.target = _host_port(target)
        self.faults = faults
        self.listen = _host_port(listen)
        self.armed = armed
        self.address = ""
        self.rng = random.Random(faults.seed)
        self.stats: collections.Counter = collections.Counter()
        self._changed = threading.Condition()
        self._partition_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._conns: set[_Connection] = set()
        self._tasks: set[asyncio.Task] = set()

    # --- control, from any thread -------------------------------------------------
    def start(self) -> str:
        """Start listening (in a thread of its own); returns the address, "host:port"."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._serve(ready))
            except BaseException as e:  # noqa: BLE001 (reported to start's caller)
                failed.append(e)
                ready.set()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self.address

    def close(self) -> None:
        """Stop listening and reset every connection."""
        if self._loop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def arm(self, armed: bool = True) -> None:
        """Apply the faults from now on (or not)."""
        self.armed = armed

    def partition(self, seconds: float) -> None:
        """Let nothing cross for `seconds`, starting now (see the module docstring)."""
        self._loop.call_soon_threadsafe(self._start_partition, seconds)

    def wait_for(self, name: str, n: int = 1, timeout: float = 10.0) -> bool:
        """Block until stats[name] >= n (True) or `timeout` passes (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.stats[name] >= n, timeout)

    def snapshot(self) -> dict:
        with self._changed:
            return dict(self.stats)

    # --- the event loop -----------------------------------------------------------
    def _count(self, name: str, n: int = 1) -> None:
        with self._changed:
            self.stats[name] += n
            self._changed.notify_all()

    def _start_partition(self, seconds: float) -> None:
        loop = self._loop
        self._partition_until = max(self._partition_until, loop.time() + seconds)
        self._count("partitions")
        loop.call_at(self._partition_until, self._count, "partitions_healed")

    async def _hold(self, conn: _Connection | None, until: float = 0.0) -> None:
        """Wait out a delivery time, a partition and the connection's stall."""
        loop = self._loop
        while True:
            stalled = conn.stalled_until if conn is not None else 0.0
            end = max(until, self._partition_until, stalled)
            now = loop.time()
            if end <= now:
                return
            await asyncio.sleep(end - now)

    async def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._accept, *self.listen)
        host, port = server.sockets[0].getsockname()[:2]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        ready.set()
        async with server:
            await self._stop.wait()
        for conn in list(self._conns):
            conn.reset(counted=False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, client_r, client_w) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._proxy(client_r, client_w)
        except asyncio.CancelledError:  # the proxy is closing
            _reset(client_w)
        finally:
            self._tasks.discard(task)

    async def _proxy(self, client_r, client_w) -> None:
        self._count("connections")
        try:
            await self._hold(None)  # a partition: the SYN would not get through
            upstream_r, upstream_w = await asyncio.open_connection(*self.target)
        except OSError:
            self._count("refused")
            _reset(client_w)
            return
        conn = _Connection(self, client_w, upstream_w)
        self._conns.add(conn)
        try:
            await asyncio.gather(
                self._pump(conn, client_r, upstream_w, self.faults.up, "bytes_up"),
                self._pump(conn, upstream_r, client_w, self.faults.down, "bytes_down"),
            )
        finally:
            self._conns.discard(conn)
            if not conn.done:
                conn.done = True
                for w in conn.writers:
                    w.close()

    async def _pump(self, conn, reader, writer, leg: Leg, counter: str) -> None:
        queue: asyncio.Queue = asyncio.Queue(QUEUE_CHUNKS)
        last = [0.0]

        async def read() -> None:
            try:
                while True:
                    data = await reader.read(CHUNK_BYTES)
                    if not data:
                        break
                    now = self._loop.time()
                    wait = leg.delay_s + conn.rng.uniform(-leg.jitter_s, leg.jitter_s)
                    last[0] = max(last[0], now + max(0.0, wait) if self.armed else now)
                    await queue.put((last[0], data))
            except OSError:  # the peer reset: pass the reset on
                conn.reset(counted=False)
            await queue.put(_EOF)

        async def write() -> None:
            while not conn.done:
                item = await queue.get()
                if item is _EOF:
                    with contextlib.suppress(OSError):
                        if writer.can_write_eof():
                            writer.write_eof()
                    return
                at, data = item
                await self._hold(conn, at if self.armed else 0.0)
                if conn.done:
                    return
                try:
                    writer.write(data)
                    await writer.drain()
                except OSError:
                    conn.reset(counted=False)
                    return
                conn.delivered(len(data), self._loop.time())
                self._count(counter, len(data))  # after: a count seen is a count applied

        reading = asyncio.ensure_future(read())
        try:
            await write()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m jaxattn.bench.fault_proxy",
        description="A TCP proxy with latency, jitter, resets, stalls and partitions. Prints "
        "'listening on HOST:PORT'; SIGUSR1 arms the faults (with --calm), SIGUSR2 starts a "
        "partition of --partition-s seconds (each says so on stdout); SIGTERM prints the "
        "counts as JSON and exits.",
    )
    p.add_argument("--target", required=True, metavar="HOST:PORT")
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT")
    p.add_argument("--delay-ms", type=float, default=0.0, help="each direction's delay")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="+- this, uniform")
    p.add_argument("--down-delay-ms", type=float, default=None, help="server -> client delay")
    p.add_argument("--down-jitter-ms", type=float, default=None)
    p.add_argument("--reset-after", metavar="LO:HI", help="reset after LO..HI bytes")
    p.add_argument("--stall-after", metavar="LO:HI", help="stall after LO..HI bytes")
    p.add_argument("--stall-s", type=float, default=0.0)
    p.add_argument("--partition-s", type=float, default=5.0, help="length of a SIGUSR2 partition")
    p.add_argument("--calm", action="store_true", help="start with the faults off (SIGUSR1)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    def bounds(text):
        return None if text is None else tuple(int(x) for x in text.split(":", 1))

    up = Leg(args.delay_ms / 1e3, args.jitter_ms / 1e3)
    down = Leg(
        (args.delay_ms if args.down_delay_ms is None else args.down_delay_ms) / 1e3,
        (args.jitter_ms if args.down_jitter_ms is None else args.down_jitter_ms) / 1e3,
    )
    faults = Faults(
        up, down, bounds(args.reset_after), bounds(args.stall_after), args.stall_s, args.seed
    )
    proxy = FaultProxy(args.target, faults, args.listen, armed=not args.calm)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def arm(*_) -> None:
        proxy.arm()
        print("armed", flush=True)

    def partition(*_) -> None:
        proxy.partition(args.partition_s)
        print(f"partition for {args.partition_s:g} s", flush=True)

    signal.signal(signal.SIGUSR1, arm)
    signal.signal(signal.SIGUSR2, partition)
    print(f"listening on {proxy.start()}", flush=True)
    while not stop.wait(0.5):  # signal handlers run between waits
        pass
    proxy.close()
    print(json.dumps(proxy.snapshot()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
