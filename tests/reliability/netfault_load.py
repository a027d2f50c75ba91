"""The client side of test_rel_netfault.py's end-to-end run, run in the client namespace.

    python netfault_load.py PLAN.pickle   # prints one JSON line: load summary, proxy counts

PLAN (written by the test): the server's address, the fault proxy's `Faults`, the
load's mix and its right answers (`jaxattn.bench.expect`, computed in the test's
process by the reference engine), clients and requests. The proxy runs in this
process, on the client namespace's own loopback, in front of the server across
the veth pair: client -> proxy (latency) -> veth (loss) -> `jaxattn serve`.
"""

from __future__ import annotations

import json
import pickle
import sys

from jaxattn.bench.fault_proxy import FaultProxy
from jaxattn.bench.load_generator import run_load


def main(path: str) -> None:
    with open(path, "rb") as f:
        plan = pickle.load(f)
    with FaultProxy(plan["server"], plan["faults"]) as proxy:
        result = run_load(
            proxy.address,
            plan["mix"],
            plan["expected"],
            clients=plan["clients"],
            max_requests=plan["requests"],
            client_options=dict(timeout=60),
        )
    print(json.dumps({"load": result.summary(), "proxy": proxy.snapshot()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
