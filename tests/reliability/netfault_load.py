"""The client side of test_rel_netfault.py's end-to-end run, run in the client namespace.

    python netfault_load.py PLAN.pickle   # prints one JSON line: load summary, proxy counts

PLAN (written by the test): the server's address ("server"), or the replicas'
("servers"), the fault proxy's `Faults`, the load's mix and its right answers
(`jaxattn.bench.expect`, computed in the test's process by the reference
engine), clients and requests. One proxy per server runs in this process, on
the client namespace's own loopback, in front of it across the veth pair:
client -> proxy (latency, resets) -> veth (loss) -> `jaxattn serve`; each
simulated client is given every proxy's address. The proxy counts printed are
summed over the proxies.
"""

from __future__ import annotations

import collections
import contextlib
import json
import pickle
import sys

from jaxattn.bench.fault_proxy import FaultProxy, Faults
from jaxattn.bench.load_generator import run_load


def main(path: str) -> None:
    with open(path, "rb") as f:
        plan = pickle.load(f)
    servers = plan.get("servers") or [plan["server"]]
    with contextlib.ExitStack() as stack:
        proxies = []
        for k, server in enumerate(servers):  # each its own draws of the fault thresholds
            f = plan["faults"]
            faults = Faults(f.up, f.down, f.reset_after, f.stall_after, f.stall_s, f.seed + k)
            proxies.append(stack.enter_context(FaultProxy(server, faults)))
        result = run_load(
            [p.address for p in proxies],
            plan["mix"],
            plan["expected"],
            clients=plan["clients"],
            max_requests=plan["requests"],
            client_options=dict(timeout=60),
        )
    counts = sum((collections.Counter(p.snapshot()) for p in proxies), collections.Counter())
    print(json.dumps({"load": result.summary(), "proxy": dict(counts)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
