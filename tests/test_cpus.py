"""The CPUs the process may use (`jaxattn.cpus.usable`): its affinity mask, or fewer
where a cgroup CPU quota (v2's cpu.max, v1's cfs quota and period, at any level from
the process's cgroup up) allows less, read from fake /proc and /sys/fs/cgroup trees;
and every pool sized by CPUs sized by it."""

from __future__ import annotations

import pytest

from jaxattn import cpus
from jaxattn.capture import bulk
from jaxattn.engine.pipeline import compile_threads
from jaxattn.wire import codec_pool


class Tree:
    """A fake /proc/self/cgroup and /sys/fs/cgroup under tmp_path."""

    def __init__(self, tmp_path):
        self.proc_cgroup = tmp_path / "cgroup"
        self.root = tmp_path / "sys_fs_cgroup"
        self.root.mkdir()

    def cgroups(self, *lines: str) -> None:
        self.proc_cgroup.write_text("".join(line + "\n" for line in lines))

    def write(self, rel: str, name: str, text: str) -> None:
        d = self.root / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text + "\n")

    def quota(self) -> float | None:
        return cpus.cgroup_cpus(str(self.proc_cgroup), str(self.root))

    def usable(self) -> int:
        return cpus.usable(str(self.proc_cgroup), str(self.root))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setattr(cpus, "affinity", lambda: 64)  # a 64-core node
    return Tree(tmp_path)


def test_no_cgroup_files_leave_the_affinity_mask(tree):
    assert tree.quota() is None and tree.usable() == 64
    tree.cgroups("0::/a")  # a cgroup, but no cpu.max anywhere
    assert tree.quota() is None and tree.usable() == 64


def test_a_v2_quota_in_a_nested_cgroup(tree):
    """Kubernetes' limits.cpu: 2 is cpu.max "200000 100000" in the container's cgroup."""
    tree.cgroups("0::/kubepods/pod1/ctr")
    tree.write("kubepods/pod1/ctr", "cpu.max", "200000 100000")
    assert tree.quota() == 2.0 and tree.usable() == 2


def test_max_is_no_quota(tree):
    tree.cgroups("0::/a")
    tree.write("a", "cpu.max", "max 100000")
    assert tree.quota() is None and tree.usable() == 64


def test_the_least_quota_of_every_level_up_to_the_root_decides(tree):
    tree.cgroups("0::/pod/ctr")
    tree.write("pod/ctr", "cpu.max", "max 100000")
    tree.write("pod", "cpu.max", "300000 100000")  # the pod's limit, above the container
    tree.write("", "cpu.max", "800000 100000")
    assert tree.quota() == 3.0 and tree.usable() == 3
    tree.write("pod/ctr", "cpu.max", "150000 100000")  # 1.5 CPUs: two threads, rounded up
    assert tree.quota() == 1.5 and tree.usable() == 2


def test_a_quota_under_one_cpu_is_one(tree):
    tree.cgroups("0::/a")
    tree.write("a", "cpu.max", "25000 100000")  # 250m
    assert tree.quota() == 0.25 and tree.usable() == 1


def test_inside_a_container_the_mounted_root_is_the_processs_cgroup(tree):
    """A cgroup namespace says "0::/", or the host's path that is not mounted here: the
    levels that do not exist are passed over, the root's quota counts."""
    tree.cgroups("0::/")
    tree.write("", "cpu.max", "400000 100000")
    assert tree.usable() == 4
    tree.cgroups("0::/kubepods/burstable/pod9/abc")
    assert tree.usable() == 4


def test_a_v1_quota_under_cpu_cpuacct(tree):
    tree.cgroups("5:cpu,cpuacct:/docker/abc", "4:memory:/docker/abc", "1:name=systemd:/x")
    tree.write("cpu,cpuacct/docker/abc", "cpu.cfs_quota_us", "300000")
    tree.write("cpu,cpuacct/docker/abc", "cpu.cfs_period_us", "100000")
    assert tree.quota() == 3.0 and tree.usable() == 3


def test_a_v1_quota_of_minus_one_is_none_and_cpu_may_be_mounted_alone(tree):
    tree.cgroups("3:cpuset:/", "2:cpuacct:/", "1:cpu:/job/7")
    tree.write("cpu/job/7", "cpu.cfs_quota_us", "-1")
    tree.write("cpu/job/7", "cpu.cfs_period_us", "100000")
    assert tree.quota() is None and tree.usable() == 64
    tree.write("cpu/job", "cpu.cfs_quota_us", "50000")  # the parent's: half a CPU
    tree.write("cpu/job", "cpu.cfs_period_us", "100000")
    assert tree.quota() == 0.5 and tree.usable() == 1


def test_v1_and_v2_together_the_least(tree):
    tree.cgroups("1:cpu,cpuacct:/a", "0::/b")
    tree.write("cpu,cpuacct/a", "cpu.cfs_quota_us", "600000")
    tree.write("cpu,cpuacct/a", "cpu.cfs_period_us", "100000")
    tree.write("b", "cpu.max", "500000 100000")
    assert tree.quota() == 5.0


@pytest.mark.parametrize("text", ["garbage", "200000", "200000 0", "0 100000", "-5 100000"])
def test_a_file_that_makes_no_sense_is_passed_over(tree, text):
    tree.cgroups("0::/a")
    tree.write("a", "cpu.max", text)
    tree.write("", "cpu.max", "700000 100000")
    assert tree.quota() == 7.0


def test_the_affinity_mask_wins_where_it_is_smaller(tree, monkeypatch):
    monkeypatch.setattr(cpus, "affinity", lambda: 2)  # taskset -c 0,1
    tree.cgroups("0::/a")
    tree.write("a", "cpu.max", "800000 100000")
    assert tree.usable() == 2


def test_an_unreadable_proc_cgroup_is_no_quota(tree, tmp_path):
    assert cpus.usable(str(tmp_path / "absent"), str(tree.root)) == 64
    tree.proc_cgroup.write_bytes(b"\xff\xfe:not utf-8\n")
    assert tree.quota() is None


def test_every_pool_is_sized_by_the_quota_not_the_nodes_cores(tree, monkeypatch):
    """A pod limited to 2 CPUs on a 64-core node (the process's default files, pointed
    at the fake tree): the copy pool one helper beside the caller, the codec pool two
    threads, one compile at a time."""
    monkeypatch.setattr(cpus, "PROC_CGROUP", str(tree.proc_cgroup))
    monkeypatch.setattr(cpus, "CGROUP_ROOT", str(tree.root))
    monkeypatch.delenv(codec_pool.THREADS_ENV, raising=False)
    tree.cgroups("0::/kubepods/pod1/ctr")
    assert (bulk.helpers(), codec_pool.workers(), compile_threads(40)) == (7, 8, 8)
    tree.write("kubepods/pod1", "cpu.max", "200000 100000")
    assert cpus.usable() == 2
    assert (bulk.helpers(), codec_pool.workers(), compile_threads(40)) == (1, 2, 1)


def test_a_capture_call_with_nothing_to_compile_ahead_reads_no_cgroup_file(
    bert_checkpoint, monkeypatch
):
    """A call whose shapes are compiled does not size a compile pool, so reads no cgroup
    file (those reads cost ~150 us a call, on every small server request)."""
    import jaxattn

    engine = jaxattn.load(bert_checkpoint, buckets=(16,))
    engine.capture(["a b c"], what=("attention",))  # compiled
    reads = []
    real = cpus.cgroup_cpus
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda *a: reads.append(a) or real(*a))
    for _ in range(3):
        engine.capture(["a b c"], what=("attention",))
    assert reads == []


@pytest.mark.parametrize("mount", ["cpuacct,cpu", "cpu,cpuacct,cpuset"])
def test_a_v1_quota_under_the_hierarchy_the_cgroup_line_names(tmp_path, monkeypatch, mount):
    """v1's cpu hierarchy mounted under the controllers its /proc/self/cgroup line lists
    (no `cpu` or `cpu,cpuacct` directory) still counts."""
    monkeypatch.setattr(cpus, "affinity", lambda: 64)
    proc = tmp_path / "cgroup"
    proc.write_text(f"4:{mount}:/docker/x\n")
    level = tmp_path / "root" / mount
    level.mkdir(parents=True)
    (level / "cpu.cfs_quota_us").write_text("200000\n")
    (level / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.usable(str(proc), str(tmp_path / "root")) == 2


def test_one_odd_line_of_proc_cgroup_does_not_hide_the_others(tmp_path, monkeypatch):
    """A line not of the form id:controllers:path (the kernel writes none) is passed over,
    not the end of the file."""
    monkeypatch.setattr(cpus, "affinity", lambda: 64)
    proc = tmp_path / "cgroup"
    proc.write_text("odd\n0::/a\n")
    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "root" / "a" / "cpu.max").write_text("200000 100000\n")
    assert cpus.usable(str(proc), str(tmp_path / "root")) == 2
