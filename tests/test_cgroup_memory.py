"""The host's available memory inside a container: the least of MemAvailable and what
the process's memory cgroups (v2 and v1, every level up to the root) leave it, read from
fake /proc and /sys/fs/cgroup trees, and the refusal naming the one that decided."""

from __future__ import annotations

import pytest

import jaxattn
from jaxattn.engine import host
from jaxattn.errors import HostMemoryError

GB = 1_000_000_000
V1_NONE = "9223372036854771712"  # what cgroup v1 writes for no limit (4 KiB pages)


class Tree:
    """A fake /proc/meminfo, /proc/self/cgroup and /sys/fs/cgroup under tmp_path."""

    def __init__(self, tmp_path):
        self.meminfo = tmp_path / "meminfo"
        self.proc_cgroup = tmp_path / "cgroup"
        self.root = tmp_path / "sys_fs_cgroup"
        self.root.mkdir()

    def available(self):
        return host.available_bytes(str(self.meminfo), str(self.proc_cgroup), str(self.root))

    def headroom(self):
        return host.cgroup_headroom(str(self.proc_cgroup), str(self.root))

    def mem_available(self, kb: int) -> None:
        self.meminfo.write_text(f"MemTotal: 99999999 kB\nMemFree: 5 kB\nMemAvailable: {kb} kB\n")

    def cgroups(self, *lines: str) -> None:
        self.proc_cgroup.write_text("".join(line + "\n" for line in lines))

    def files(self, rel: str, **files: str) -> str:
        """Write `files` (name with "_" for ".") in the directory `rel` under the root."""
        level = self.root / rel
        level.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (level / name.replace("_", ".", 1)).write_text(text)
        return str(level)

    def v2(self, rel: str, limit: str, current: int, inactive: int) -> str:
        stat = f"anon 1\nfile 2\nactive_file 3\ninactive_file {inactive}\nslab 4\n"
        return self.files(rel, memory_max=limit, memory_current=f"{current}\n", memory_stat=stat)

    def v1(self, rel: str, limit: str, usage: int, total_inactive: int) -> str:
        # inactive_file is the level's own; total_inactive_file its subtree's, which counts
        stat = f"cache 9\ninactive_file 7\ntotal_inactive_file {total_inactive}\n"
        usage_text = f"{usage}\n"
        return self.files(
            rel, memory_limit_in_bytes=limit, memory_usage_in_bytes=usage_text, memory_stat=stat
        )


@pytest.fixture
def tree(tmp_path):
    return Tree(tmp_path)


def test_v2_the_tightest_level_up_to_the_root_decides(tree):
    tree.cgroups("0::/kubepods/pod1/ctr")
    tree.v2("", "max", 80 * GB, 0)  # the root: no limit
    tree.v2("kubepods", str(100 * GB), 50 * GB, 10 * GB)  # 100 - (50 - 10) = 60 GB
    tree.v2("kubepods/pod1", str(6 * GB), 5 * GB, 1 * GB)  # 6 - (5 - 1) = 2 GB
    tree.v2("kubepods/pod1/ctr", str(8 * GB), 1 * GB, 0)  # 8 - 1 = 7 GB
    got = tree.headroom()
    assert got == 2 * GB
    assert got.source == (
        f"the container's memory limit (cgroup {tree.root}/kubepods/pod1/memory.max: "
        "6.0 GB, 4.0 GB of it in use)"
    )
    # the process's own level tighter than its parents: it decides
    tree.v2("kubepods/pod1/ctr", str(3 * GB), int(2.5 * GB), int(0.5 * GB))  # 3 - 2 = 1 GB
    assert tree.headroom() == 1 * GB
    assert "pod1/ctr/memory.max: 3.0 GB, 2.0 GB of it in use" in tree.headroom().source


def test_v2_max_at_every_level_is_no_limit(tree):
    tree.cgroups("0::/a/b")
    for rel in ("", "a", "a/b"):
        tree.v2(rel, "max", 5 * GB, 0)
    assert tree.headroom() is None
    tree.mem_available(1234)
    got = tree.available()
    assert got == 1234 * 1024 and got.source == "MemAvailable in /proc/meminfo"


def test_inside_a_container_the_mounted_root_is_the_processs_cgroup(tree):
    """cgroup namespaces: /proc/self/cgroup says "0::/" and /sys/fs/cgroup is the
    container's own cgroup, its limit in the root's memory.max."""
    tree.cgroups("0::/")
    tree.v2("", str(6 * GB), 2 * GB, int(0.5 * GB))
    assert tree.headroom() == int(4.5 * GB)


def test_the_inactive_file_cache_is_left_out_of_the_working_set(tree):
    tree.cgroups("0::/c")
    tree.v2("c", str(4 * GB), 3 * GB, 2 * GB)
    assert tree.headroom() == 3 * GB  # 4 - (3 - 2), not 4 - 3
    # more inactive cache than usage (counted at another moment): a working set of 0
    tree.v2("c", str(4 * GB), 1 * GB, 2 * GB)
    assert tree.headroom() == 4 * GB
    # usage over the limit: nothing left, which is 0 (a refusal), not unknown
    tree.v2("c", str(4 * GB), 6 * GB, 1 * GB)
    got = tree.headroom()
    assert got is not None and got == 0
    tree.mem_available(10**9)
    assert tree.available() == 0
    with pytest.raises(HostMemoryError):
        host.HeldResults.check(1, tree.available)


def test_v1_at_the_processs_path(tree):
    tree.cgroups("5:cpu,cpuacct:/docker/abc", "4:memory:/docker/abc", "0::/")
    tree.v1("memory", V1_NONE, 40 * GB, 0)  # the root: no limit
    tree.v1("memory/docker", V1_NONE, 30 * GB, 0)
    tree.v1("memory/docker/abc", str(2 * GB), int(1.5 * GB), int(0.5 * GB))
    got = tree.headroom()
    assert got == 1 * GB  # 2 - (1.5 - 0.5): total_inactive_file, not inactive_file (7)
    assert got.source == (
        f"the container's memory limit (cgroup {tree.root}/memory/docker/abc/"
        "memory.limit_in_bytes: 2.0 GB, 1.0 GB of it in use)"
    )


def test_v1_inside_a_container_without_the_path_reads_the_mounted_root(tree):
    tree.cgroups("4:memory:/kubepods/burstable/pod1/ctr", "1:name=systemd:/x")
    tree.v1("memory", str(6 * GB), 3 * GB, 1 * GB)
    assert tree.headroom() == 4 * GB
    assert f"cgroup {tree.root}/memory/memory.limit_in_bytes: 6.0 GB" in tree.headroom().source
    # the huge "no limit" there: no limit known
    tree.v1("memory", V1_NONE, 3 * GB, 1 * GB)
    assert tree.headroom() is None


def test_a_hybrid_host_reads_both_versions_and_takes_the_least(tree):
    tree.cgroups("4:memory:/m", "0::/u")
    tree.v1("memory/m", str(5 * GB), 1 * GB, 0)  # 4 GB
    tree.v2("u", str(3 * GB), 1 * GB, 0)  # 2 GB
    assert tree.headroom() == 2 * GB
    tree.v2("u", "max", 1 * GB, 0)
    assert tree.headroom() == 4 * GB


@pytest.mark.parametrize(
    "broken",
    [
        {"memory_max": "lots\n"},
        {"memory_max": ""},
        {"memory_current": "12 kB\n"},
        {"memory_stat": "anon 1\nfile 2\n"},  # no inactive_file
        {"memory_stat": "inactive_file\n"},
        {"memory_stat": "inactive_file many\n"},
        {"memory_stat": "\xff\xfe\n"},
    ],
)
def test_a_malformed_level_is_unknown_and_its_parent_still_counts(tree, broken):
    tree.cgroups("0::/p/c")
    tree.v2("p/c", str(1 * GB), 0, 0)
    tree.files("p/c", **broken)
    assert tree.headroom() is None
    tree.v2("p", str(5 * GB), 2 * GB, 0)
    assert tree.headroom() == 3 * GB


def test_missing_or_unreadable_cgroup_files_are_unknown_never_an_error(tree):
    assert tree.headroom() is None  # no /proc/self/cgroup
    tree.v2("", str(1 * GB), 0, 0)
    for garbage in ("", "nonsense\n", "0:/no-path-field\n", "\xff:\xfe\n", "4:cpu:/a\n"):
        tree.proc_cgroup.write_text(garbage)
        assert tree.headroom() is None
    tree.cgroups("0::/c")
    (tree.root / "c").mkdir()
    (tree.root / "c" / "memory.max").mkdir()  # unreadable: a directory
    (tree.root / "memory.max").unlink()
    assert tree.headroom() is None
    tree.proc_cgroup.unlink()
    tree.proc_cgroup.mkdir()
    assert tree.headroom() is None


def test_the_least_of_memavailable_and_the_cgroup_decides(tree):
    tree.cgroups("0::/c")
    tree.v2("c", str(6 * GB), 2 * GB, 0)  # 4 GB left under the limit
    tree.mem_available(1_000_000)  # 1.024 GB on the machine: it decides
    got = tree.available()
    assert got == 1_024_000_000 and got.source == "MemAvailable in /proc/meminfo"
    tree.mem_available(30_000_000)  # 30.72 GB on the machine: the container's limit decides
    got = tree.available()
    assert got == 4 * GB and got.source.startswith("the container's memory limit (cgroup ")
    tree.meminfo.unlink()  # either alone where the other is unknown
    assert tree.available() == 4 * GB
    tree.v2("c", "max", 2 * GB, 0)
    assert tree.available() is None  # both unknown: no refusal
    host.HeldResults.check(10**15, tree.available)


def test_the_refusal_names_the_container_limit_that_decided(tree):
    tree.cgroups("0::/c")
    tree.v2("c", str(6 * GB), 5 * GB, 0)
    tree.mem_available(30_000_000)
    with pytest.raises(HostMemoryError) as caught:
        host.HeldResults.check(2 * GB, tree.available)
    message = str(caught.value)
    assert message.startswith(
        "this call's results come to 2.0 GB (2000000000 bytes), more than the host's "
        f"available memory (1.0 GB, 1000000000 bytes: the container's memory limit (cgroup "
        f"{tree.root}/c/memory.max: 6.0 GB, 5.0 GB of it in use)): take them as they come"
    )
    assert "MemAvailable" not in message
    host.HeldResults.check(1 * GB, tree.available)  # exactly what is left: allowed
    tree.mem_available(500_000)  # 512 MB on the machine: MemAvailable named
    with pytest.raises(HostMemoryError, match=r"512000000 bytes: MemAvailable in /proc/meminfo\)"):
        host.HeldResults.check(1 * GB, tree.available)


def test_engine_capture_is_refused_by_the_container_limit_before_anything_runs(
    tree, bert_checkpoint
):
    engine = jaxattn.load(bert_checkpoint, buckets=(24,))
    tree.cgroups("0::/")
    tree.v2("", str(1000), 900, 0)  # 100 bytes left in the container
    tree.mem_available(10**8)
    engine.pipeline.available_bytes = tree.available
    with pytest.raises(HostMemoryError, match=r"\(100 B, 100 bytes: the container's memory limit"):
        engine.capture(["the cat sat"])
    tree.v2("", "max", 900, 0)  # no limit: MemAvailable (100 GB) lets it through
    assert len(engine.capture(["the cat sat"])) == 1
