"""A client that disappears: one Capture call from a short-lived process the soak SIGKILLs.

    echo '{"addresses": [...], "texts": [...], "what": [...], "dtype": "float32",
           "codec": "none"}' | python -m jaxattn.bench.soak_client

Prints "calling" before the call, "example N" as each example arrives and "done"
(or "error CODE") at the end, one line each, flushed: the soak (`jaxattn.bench.soak`)
kills it with SIGKILL at one of those points, so the servers see a client vanish
mid-call (its TCP connection closed by the kernel, no gRPC cancel). Numpy and grpc
only.
"""

from __future__ import annotations

import json
import sys

from jaxattn.client.client import AttentionClient
from jaxattn.client.errors import AttentionServiceError


def main() -> int:
    job = json.loads(sys.stdin.read())
    texts = [t if isinstance(t, str) else tuple(t) for t in job["texts"]]
    with AttentionClient(job["addresses"], timeout=job.get("timeout", 60.0)) as client:
        print("calling", flush=True)
        try:
            for n, _ in enumerate(
                client.stream(texts, what=job["what"], dtype=job["dtype"], codec=job["codec"])
            ):
                print(f"example {n + 1}", flush=True)
        except AttentionServiceError as e:
            print(f"error {e.code.name}", flush=True)
            return 1
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
