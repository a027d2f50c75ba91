"""`jaxattn cache dir|info|clear` on caches made in tmp directories: where each kind is,
what it counts and weighs (against the bytes written here), and that clear removes
jaxattn's and JAX's files only. Every test sets the variables itself (never the
user's cache); none needs jax."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxattn.cli import main

KEY = "0123456789abcdef" * 4  # a sha256 hex digest, as every writer names its entries
OTHER_KEY = "fedcba9876543210" * 4


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh $HOME and $XDG_CACHE_HOME, every cache variable unset: the defaults."""
    for name in ("JAXATTN_COMPILATION_CACHE", "JAXATTN_PROGRAM_CACHE", "JAX_COMPILATION_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


# What each kind's files weigh here: entries, the writer's other files, and files that
# are not jaxattn's (kept by clear, counted by nobody).
COMPILED = {f"jit_step-{KEY}-cache": 1000, f"pmap_f-{OTHER_KEY}-cache": 2500}
COMPILED_OTHERS = {
    f"jit_step-{KEY}-atime": 8,
    f"pmap_f-{OTHER_KEY}-atime": 8,
    "xla_gpu_per_fusion_autotune_cache_dir/a.textproto": 100,
    "xla_gpu_per_fusion_autotune_cache_dir/sub/b.textproto": 200,
}
PROGRAMS = {f"{KEY}.jaxprog": 700}
PROGRAMS_OTHERS = {"tmpab_cd123.tmp": 11}
TOKENIZERS = {f"{KEY}.json": 40_000, f"{OTHER_KEY}.json": 5_000}
TOKENIZERS_OTHERS = {".tmp-0a1b2c3d.json": 3}
UNRELATED = {
    "notes.txt": 9999,
    "mine-cache": 5,  # no JAX key
    f"jit_step-{KEY}-cache.bak": 5,
    "jaxattn-programs/x.jaxprog": 6,  # no key
    "jaxattn-programs/README": 7,
    "jaxattn-tokenizers/tokenizer.json": 8,
}


def _fill(root: Path, unrelated: bool = True) -> None:
    """The three kinds in compilation cache directory `root`, and unrelated files."""
    for names, folder in (
        ((COMPILED, COMPILED_OTHERS), root),
        ((PROGRAMS, PROGRAMS_OTHERS), root / "jaxattn-programs"),
        ((TOKENIZERS, TOKENIZERS_OTHERS), root / "jaxattn-tokenizers"),
    ):
        for table in names:
            for name, size in table.items():
                _write(folder / name, size)
    for name, size in (UNRELATED if unrelated else {}).items():
        _write(root / name, size)


@pytest.fixture
def filled(home, monkeypatch) -> Path:
    """A compilation cache directory ($JAXATTN_COMPILATION_CACHE) holding every kind, and
    unrelated files."""
    root = home / "c"
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", str(root))
    _fill(root)
    return root


def _run(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(["cache", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def _table(lines: list[str]) -> dict[str, list[str]]:
    return {line.split()[0].rstrip(":"): line.split()[1:] for line in lines}


def test_dir_is_the_engines_directories(home, monkeypatch, capsys):
    default = home / "xdg" / "jaxattn" / "xla"
    code, lines, _ = _run(capsys, "dir")
    assert code == 0
    assert _table(lines) == {
        "compiled": [str(default)],
        "programs": [str(default / "jaxattn-programs")],
        "tokenizers": [str(default / "jaxattn-tokenizers")],
    }
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _table(_run(capsys, "dir", "--compiled")[1]) == {
        "compiled": [str(home / "home" / ".cache" / "jaxattn" / "xla")]
    }
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", str(home / "c"))
    monkeypatch.setenv("JAXATTN_PROGRAM_CACHE", str(home / "p"))
    assert _table(_run(capsys, "dir")[1]) == {
        "compiled": [str(home / "c")],
        "programs": [str(home / "p")],
        "tokenizers": [str(home / "c" / "jaxattn-tokenizers")],
    }
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(home / "j"))  # what JAX was given wins
    assert _table(_run(capsys, "dir", "--tokenizers", "--compiled")[1]) == {
        "compiled": [str(home / "j")],
        "tokenizers": [str(home / "j" / "jaxattn-tokenizers")],
    }


def test_dir_says_which_variable_turned_a_cache_off(home, monkeypatch, capsys):
    monkeypatch.setenv("JAXATTN_PROGRAM_CACHE", "Off")
    assert _run(capsys, "dir", "--programs")[1] == ["programs  off (JAXATTN_PROGRAM_CACHE=Off)"]
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", "off")
    monkeypatch.delenv("JAXATTN_PROGRAM_CACHE")
    assert _run(capsys, "dir")[1] == [
        "compiled    off (JAXATTN_COMPILATION_CACHE=off)",
        "programs    off (the compilation cache is off)",
        "tokenizers  off (the compilation cache is off)",
    ]
    monkeypatch.setenv("JAXATTN_PROGRAM_CACHE", str(home / "p"))  # its own directory: on
    assert _table(_run(capsys, "dir", "--programs")[1]) == {"programs": [str(home / "p")]}


def test_info_counts_and_weighs_what_jaxattn_and_jax_wrote(filled, capsys):
    root = filled
    code, lines, _ = _run(capsys, "info")
    assert code == 0
    # compiled: 1000 + 2500 + 8 + 8 + 100 + 200 = 3816 bytes; programs 700 + 11;
    # tokenizers 40000 + 5000 + 3; in all 49538. The unrelated files count nowhere.
    assert _table(lines) == {
        "compiled": ["2", "entries", "3.8", "kB", str(root)],
        "programs": ["1", "entry", "711", "B", str(root / "jaxattn-programs")],
        "tokenizers": ["2", "entries", "45.0", "kB", str(root / "jaxattn-tokenizers")],
        "total": ["5", "entries", "49.5", "kB"],
    }
    assert _table(_run(capsys, "info", "--programs")[1]) == {
        "programs": ["1", "entry", "711", "B", str(root / "jaxattn-programs")],
        "total": ["1", "entry", "711", "B"],
    }


def test_info_of_caches_off_or_absent(home, monkeypatch, capsys):
    code, lines, _ = _run(capsys, "info", "--compiled")
    assert code == 0
    assert lines[0].endswith(f"{home / 'xdg' / 'jaxattn' / 'xla'} (absent)")
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", "0")
    assert _table(_run(capsys, "info")[1]) == {
        "compiled": ["off", "(JAXATTN_COMPILATION_CACHE=0)"],
        "programs": ["off", "(the", "compilation", "cache", "is", "off)"],
        "tokenizers": ["off", "(the", "compilation", "cache", "is", "off)"],
        "total": ["0", "entries", "0", "B"],
    }
    assert not (home / "xdg").exists()


def _left(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


KINDS = {
    "compiled": ({**COMPILED, **COMPILED_OTHERS}, 2, "3.8 kB"),
    "programs": ({f"jaxattn-programs/{n}": 0 for n in {**PROGRAMS, **PROGRAMS_OTHERS}}, 1, "711 B"),
    "tokenizers": (
        {f"jaxattn-tokenizers/{n}": 0 for n in {**TOKENIZERS, **TOKENIZERS_OTHERS}},
        2,
        "45.0 kB",
    ),
}


@pytest.mark.parametrize("kind", KINDS)
def test_clear_one_kind_removes_its_files_only(kind, filled, capsys):
    root = filled
    before = _left(root)
    gone, entries, size = KINDS[kind]
    code, lines, err = _run(capsys, "clear", f"--{kind}")
    assert code == 0 and not err
    assert _left(root) == before - set(gone)
    noun = "entry" if entries == 1 else "entries"
    where = root if kind == "compiled" else root / f"jaxattn-{kind}"
    assert lines == [
        f"{kind}: removed {entries} {noun} ({size}) from {where}",
        f"removed {entries} {noun}, {size} in all",
    ]


def test_clear_everything_keeps_unrelated_files_and_their_directories(filled, capsys):
    root = filled
    code, lines, _ = _run(capsys, "clear")
    assert code == 0
    assert _left(root) == set(UNRELATED)
    assert not (root / "xla_gpu_per_fusion_autotune_cache_dir").exists()  # emptied: removed
    assert lines[-1] == "removed 5 entries, 49.5 kB in all"


def test_clear_removes_directories_left_empty(home, capsys):
    root = home / "xdg" / "jaxattn" / "xla"  # the default place
    _fill(root, unrelated=False)
    (root / "jaxattn-programs" / "kept").mkdir()  # a directory jaxattn did not make
    assert _run(capsys, "clear")[0] == 0
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "jaxattn-programs",
        "jaxattn-programs/kept",
    ]
    os.rmdir(root / "jaxattn-programs" / "kept")
    _fill(root, unrelated=False)
    assert _run(capsys, "clear")[0] == 0
    assert not root.exists() and (home / "xdg" / "jaxattn").is_dir()


def test_clear_a_moved_program_cache_and_links_are_not_followed(home, monkeypatch, capsys):
    programs, outside = home / "p", _write(home / "outside" / "precious.jaxprog", 3)
    monkeypatch.setenv("JAXATTN_PROGRAM_CACHE", str(programs))
    _write(programs / f"{KEY}.jaxprog", 2000)
    (programs / f"{OTHER_KEY}.jaxprog").symlink_to(outside)
    code, lines, _ = _run(capsys, "clear", "--programs")
    assert code == 0
    assert lines[0] == f"programs: removed 1 entry (2.0 kB) from {programs}"
    assert outside.read_bytes() == b"xxx"
    assert [p.name for p in programs.iterdir()] == [f"{OTHER_KEY}.jaxprog"]


def test_clear_of_caches_off_or_absent_says_so(home, monkeypatch, capsys):
    code, lines, err = _run(capsys, "clear")
    default = home / "xdg" / "jaxattn" / "xla"
    assert code == 0 and not err
    assert lines == [
        f"tokenizers: nothing to remove ({default / 'jaxattn-tokenizers'} does not exist)",
        f"programs: nothing to remove ({default / 'jaxattn-programs'} does not exist)",
        f"compiled: nothing to remove ({default} does not exist)",
        "removed 0 entries, 0 B in all",
    ]
    monkeypatch.setenv("JAXATTN_COMPILATION_CACHE", "false")
    monkeypatch.setenv("JAXATTN_PROGRAM_CACHE", "no")
    code, lines, _ = _run(capsys, "clear")
    assert code == 0
    assert lines[:3] == [
        "tokenizers: off (the compilation cache is off), nothing to remove",
        "programs: off (JAXATTN_PROGRAM_CACHE=no), nothing to remove",
        "compiled: off (JAXATTN_COMPILATION_CACHE=false), nothing to remove",
    ]
    assert not (home / "xdg").exists()


@pytest.mark.parametrize("variable", ["JAXATTN_COMPILATION_CACHE", "JAXATTN_PROGRAM_CACHE"])
@pytest.mark.parametrize("action", ["clear", "info"])
def test_a_file_as_a_cache_directory_is_refused(
    variable, action, filled, home, monkeypatch, capsys
):
    root = filled
    before = _left(root)
    file = _write(home / "a-file", 4)
    monkeypatch.setenv(variable, str(file))
    code, lines, err = _run(capsys, action)
    assert code == 2 and not lines
    assert err.count("\n") == 1 and err.startswith("jaxattn cache: error: ")
    assert f"{file} is a file, not a directory" in err and f"set {variable} to" in err
    assert file.read_bytes() == b"xxxx" and _left(root) == before  # nothing removed


def test_the_command_imports_no_jax(home):
    code = (
        "import sys; from jaxattn.cli import main; "
        "assert main(['cache', 'info']) == 0; assert main(['cache', 'clear']) == 0; "
        "assert 'jax' not in sys.modules, 'jax imported'"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
