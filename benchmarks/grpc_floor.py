"""grpc-python's own per-request CPU: the floor under the service's single-sentence rate.

    .venv/bin/python benchmarks/grpc_floor.py

A trivial server-streaming method (one 2,000-byte reply per call, as a short
sentence's attention), served by grpc-python's thread-pool server and by its asyncio
server in a child process each, called by 32 client threads of this process, each its
own channel, one call at a time, for 5 s: requests/s and the CPU milliseconds each
side spent per request. `service_scale.py --only concurrent` (and `replicas`) measure
the service's own figures on the same terms, so the two read side by side.
"""

import asyncio
import os
import subprocess
import sys
import threading
import time

import grpc

METHOD = "/floor.F/S"
PAYLOAD = b"x" * 2000


def sync_server():
    from concurrent import futures

    def stream(request, context):
        yield PAYLOAD

    handler = grpc.method_handlers_generic_handler(
        "floor.F", {"S": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(64))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def aio_server():
    async def stream(request, context):
        yield PAYLOAD

    async def main():
        handler = grpc.method_handlers_generic_handler(
            "floor.F", {"S": grpc.unary_stream_rpc_method_handler(stream)}
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    asyncio.run(main())


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def clients(addr, seconds=5, n=32):
    stop = threading.Event()
    counts = [0] * n

    def w(k):
        ch = grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])
        call = ch.unary_stream(METHOD)
        for _ in call(b"hi"):
            pass
        while not stop.is_set():
            for _ in call(b"hi"):
                pass
            counts[k] += 1

    ts = [threading.Thread(target=w, args=(k,)) for k in range(n)]
    [t.start() for t in ts]
    time.sleep(1.0)
    c0 = sum(counts)
    t0 = time.perf_counter()
    p0 = time.process_time()
    return ts, stop, counts, c0, t0, p0


if __name__ == "__main__":
    if len(sys.argv) == 2:
        (sync_server if sys.argv[1] == "sync" else aio_server)()
        sys.exit()
    for kind in ("sync", "aio"):
        proc = subprocess.Popen([sys.executable, __file__, kind], stdout=subprocess.PIPE, text=True)
        port = int(proc.stdout.readline())
        ts, stop, counts, c0, t0, p0 = clients(f"127.0.0.1:{port}")
        s0 = cpu(proc.pid)
        time.sleep(5)
        s1 = cpu(proc.pid)
        n = sum(counts) - c0
        el = time.perf_counter() - t0
        pc = time.process_time() - p0
        stop.set()
        [t.join() for t in ts]
        proc.kill()
        print(
            f"{kind}: {n / el:.0f} req/s, server {1e3 * (s1 - s0) / n:.2f} CPU ms/req, "
            f"client {1e3 * pc / n:.2f}"
        )
