"""`jaxattn serve --malloc-arenas`: glibc's arenas capped before the threads start.

Counted with glibc's own `malloc_info`, whose XML has one <heap> per arena, in a
fresh process whose 12 threads allocate while all alive: glibc gives each of them
an arena of its own unless the cap says otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxattn.errors import UsageError
from service.allocator import DEFAULT_ARENAS, cap_arenas

ROOT = Path(__file__).resolve().parents[2]
glibc = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION")),
    reason="malloc arenas are glibc's",
)

ARENAS = """
import ctypes, ctypes.util, re, sys, tempfile, threading
from service.allocator import cap_arenas
print(cap_arenas(int(sys.argv[1])), file=sys.stderr)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
all_alive, counted = threading.Barrier(13), threading.Event()
def allocate():
    block = libc.malloc(1 << 16)  # this thread's first allocation picks its arena
    all_alive.wait()
    counted.wait()
    libc.free(block)
threads = [threading.Thread(target=allocate) for _ in range(12)]
for t in threads:
    t.start()
all_alive.wait()
with tempfile.NamedTemporaryFile(suffix=".xml") as f:
    fp = libc.fopen(f.name.encode(), b"w")
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    xml = open(f.name).read()
counted.set()
for t in threads:
    t.join()
print(len(re.findall(r'<heap nr="', xml)))
"""


def arenas(cap: int, **env: str) -> tuple[int, str]:
    """(arenas in use with 12 threads allocating, what cap_arenas said) in a fresh process."""
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", ARENAS, str(cap)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]), done.stderr.strip().splitlines()[-1]


@glibc
def test_the_cap_holds_the_threads_to_that_many_arenas():
    capped, said = arenas(2)
    assert said == "malloc arenas: at most 2"
    uncapped, said_default = arenas(0)
    assert said_default == "malloc arenas: glibc's default (8 per core)"
    assert capped <= 2 < uncapped  # glibc's own: a new arena per thread, 8 per core at most
    assert uncapped >= min(12, 8 * (os.cpu_count() or 1))


@glibc
def test_the_operators_environment_wins():
    n, said = arenas(2, MALLOC_ARENA_MAX="3")
    assert said == "malloc arenas: at most 3 ($MALLOC_ARENA_MAX)"
    assert n == 3


def test_a_negative_cap_is_refused():
    with pytest.raises(UsageError, match="malloc arenas must be 0 .* got -1"):
        cap_arenas(-1)


def test_the_command_line_names_the_default_and_refuses_a_negative():
    exe = Path(sys.executable).with_name("jaxattn")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    help_text = subprocess.run(
        [str(exe), "serve", "--help"], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert f"(default {DEFAULT_ARENAS};" in " ".join(help_text.split())
    bad = subprocess.run(
        [str(exe), "serve", "--malloc-arenas", "-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--malloc-arenas" in bad.stderr and "-1" in bad.stderr
