"""A network that misbehaves, on this machine: two network namespaces and real tools' faults.

    from jaxattn.bench.fault_network import FaultyNetwork, unavailable
    with FaultyNetwork() as net:                      # raises NetworkUnavailable(reason)
        net.set_loss(1.0)                             # nftables: 1 % of TCP packets dropped
        net.set_rate("50mbit")                        # tc tbf on both ends of the link
        server = net.popen("server", ["jaxattn", "serve", "--host", net.server_ip, ...])
        client = net.popen("client", ["jaxattn", "loadtest", ...])
    # both namespaces are gone here, and every process started in them

The harness makes two namespaces of its own, "client" and "server", named
`jxnf<pid>n<k>c` / `...s` (unique per process and instance; a run killed before it
could clean up leaves them, and the next run deletes them), joined by a veth pair
with private addresses (`CLIENT_IP`, `SERVER_IP`: a namespace has its own
addresses, so every run can use the same ones), each with its own loopback up.
Nothing touches the host's interfaces, routes, loopback or nftables ruleset:
every command runs with `ip -n NS` or `ip netns exec NS`. `close()` (also at
exit, and when setting up fails) stops the processes it started and deletes
both namespaces, which deletes the veth pair with them.

Faults from real tools, inside the namespaces:

* **loss** (`set_loss(percent)`): an nftables table `jaxattn_faults` in the server
  namespace drops that share of TCP packets on the veth, each way
  (`meta l4proto tcp numgen random mod 10000 < percent * 100 drop`), and counts
  the packets it saw and dropped (`packets()`).
* **bandwidth** (`set_rate(rate)`): `tc qdisc replace ... tbf` on both ends.
* latency, jitter, resets, stalls and partitions: the kernel here has no
  `netem`, so they come from `jaxattn.bench.fault_proxy`, run between the two.

Needs Linux, root, `ip` and `tc` (iproute2) and `nft` (nftables; scripts/setup.sh
installs it as root): `unavailable()` says which is missing. Used by
tests/reliability/test_rel_netfault.py and benchmarks/faulty_network.py.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys

CLIENT_IP = "10.77.0.1"
SERVER_IP = "10.77.0.2"
TABLE = "jaxattn_faults"
_INSTANCES = itertools.count()
_NAME = re.compile(r"jxnf(\d+)n\d+[cs]")  # FaultyNetwork's names: jxnf<pid>n<k>c / s


class NetworkUnavailable(RuntimeError):
    """This machine cannot make the namespaces (the message says why)."""


def unavailable() -> str | None:
    """Why this machine cannot run a FaultyNetwork, or None if it (probably) can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing: apt-get install {package} (scripts/setup.sh, as root)"
    return None


def namespaces() -> list[str]:
    """The names `ip netns list` shows (the machine's, not only ours)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def remove_stale() -> list[str]:
    """Delete the namespaces of runs whose process is gone (killed before `close`)."""
    stale = [
        name
        for name in namespaces()
        if (m := _NAME.fullmatch(name)) and not os.path.exists(f"/proc/{m[1]}")
    ]
    for name in stale:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return stale


def _run(argv: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


class FaultyNetwork:
    """Two namespaces joined by a veth pair; see the module docstring."""

    def __init__(self):
        tag = f"jxnf{os.getpid()}n{next(_INSTANCES)}"
        self.tag = tag
        self.names = {"client": f"{tag}c", "server": f"{tag}s"}
        # Interface names live inside the namespaces; unique anyway (<= 15 characters).
        self.links = {"client": f"{tag[2:]}c", "server": f"{tag[2:]}s"}
        self.client_ip, self.server_ip = CLIENT_IP, SERVER_IP
        self.processes: list[subprocess.Popen] = []
        self._made: list[str] = []

    def __enter__(self) -> FaultyNetwork:
        return self if self._made else self.open()

    def open(self) -> FaultyNetwork:
        """Make both namespaces and the link (what `with` does, if not done yet)."""
        reason = unavailable()
        if reason:
            raise NetworkUnavailable(reason)
        remove_stale()
        atexit.register(self.close)
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        for side in ("client", "server"):
            try:
                _run(["ip", "netns", "add", self.names[side]])
            except RuntimeError as e:
                raise NetworkUnavailable(f"cannot make a network namespace: {e}") from None
            self._made.append(self.names[side])
        c, s = self.names["client"], self.names["server"]
        lc, ls = self.links["client"], self.links["server"]
        _run(["ip", "link", "add", lc, "netns", c, "type", "veth", "peer", "name", ls, "netns", s])
        for side, ip in (("client", CLIENT_IP), ("server", SERVER_IP)):
            ns, link = self.names[side], self.links[side]
            _run(["ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", link])
            _run(["ip", "-n", ns, "link", "set", link, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def command(self, side: str, argv: list[str]) -> list[str]:
        """`argv` run inside the `side` ("client" or "server") namespace."""
        return ["ip", "netns", "exec", self.names[side], *argv]

    def run(self, side: str, argv: list[str], stdin: str | None = None) -> str:
        """Run a command in a namespace and return its stdout (RuntimeError if it fails)."""
        return _run(self.command(side, argv), stdin)

    def popen(self, side: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start a process in a namespace; `close()` stops it if it still runs."""
        proc = subprocess.Popen(self.command(side, argv), **kwargs)
        self.processes.append(proc)
        return proc

    def set_loss(self, percent: float) -> None:
        """Drop `percent` % of TCP packets each way on the link (0: none, table removed)."""
        script = f"table inet {TABLE}\ndelete table inet {TABLE}\n"
        if percent > 0:
            link, n = self.links["server"], round(percent * 100)
            drop = f"meta l4proto tcp numgen random mod 10000 < {n} counter drop"
            chains = [
                f"  chain {hook} {{ type filter hook {hook} priority 0; policy accept;\n"
                f'    {side} "{link}" meta l4proto tcp counter\n'
                f'    {side} "{link}" {drop}\n  }}\n'
                for hook, side in (("input", "iifname"), ("output", "oifname"))
            ]
            script += f"table inet {TABLE} {{\n{''.join(chains)}}}\n"
        self.run("server", ["nft", "-f", "-"], stdin=script)

    def packets(self) -> tuple[int, int]:
        """(TCP packets seen on the link, packets dropped) since `set_loss`."""
        out = self.run("server", ["nft", "-j", "list", "table", "inet", TABLE])
        seen = dropped = 0
        for item in json.loads(out)["nftables"]:
            rule = item.get("rule")
            if not rule:
                continue
            counter = next((e["counter"] for e in rule["expr"] if "counter" in e), None)
            if counter is None:
                continue
            if any("drop" in e for e in rule["expr"]):
                dropped += counter["packets"]
            else:
                seen += counter["packets"]
        return seen, dropped

    def set_rate(self, rate: str, burst: str = "256kb", latency: str = "200ms") -> None:
        """Limit the link to `rate` ("50mbit") each way: tc's token bucket filter, both ends."""
        for side in ("client", "server"):
            self.run(
                side,
                ["tc", "qdisc", "replace", "dev", self.links[side], "root", "tbf"]
                + ["rate", rate, "burst", burst, "latency", latency],
            )

    def close(self) -> None:
        """Stop the processes started here, delete both namespaces. Idempotent."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes = []
        for ns in self._made:
            # Anything else still inside (a child's child) would keep the namespace alive.
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._made = []
        atexit.unregister(self.close)
