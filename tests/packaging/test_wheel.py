"""The installed package is whole: the wheel holds everything, and a client-only install works.

The wheel is built (pip wheel --no-deps --no-build-isolation: this environment's
setuptools, no index) from a copy of the build's inputs, so a stale build/ of the
checkout cannot leak into it. Its files must be exactly the package sources
(every tracked file under jaxattn/ and service/: code, the views' scripts, the
sample corpus and its licence, the .proto). Then a fresh virtual environment gets
the wheel (--no-deps) and the dependencies of its `client` extra as the wheel's
metadata lists them, from the configured package index, and captures through a
server run here on a tiny random BERT: with the Python client, and with the
`jaxattn` command (capture, then view), while jax cannot be imported there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jaxattn", "service")
LICENCES = ("LICENSE*", "LICENCE*", "COPYING*", "NOTICE*", "AUTHORS*")
WHAT = ("attention", "alpha_fx_norm")


def source_files() -> set[str]:
    """The files a wheel of the packages must hold: everything under them but caches."""
    out = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            rel = path.relative_to(ROOT)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
                out.add(rel.as_posix())
    return out


def build_inputs(dst: Path) -> Path:
    """Copy what the build reads (pyproject.toml, its readme, the packages, licence files)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dst.mkdir()
    for name in ["pyproject.toml", project["readme"], *PACKAGES]:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst / name)
    for pattern in LICENCES:
        for f in ROOT.glob(pattern):
            shutil.copy2(f, dst / f.name)
    return dst


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = build_inputs(tmp / "src")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*cmd, "-w", str(tmp / "dist"), str(src)], check=True, timeout=180)
    (found,) = (tmp / "dist").glob("jaxattn-*.whl")
    return found


def test_committed_proto_copy_is_the_contract():
    """jaxattn/v1/attention.proto (package data) is protos/'s, byte for byte."""
    import jaxattn.v1

    canonical = ROOT / "protos" / "jaxattn" / "v1" / "attention.proto"
    assert jaxattn.v1.PROTO.read_bytes() == canonical.read_bytes(), (
        "jaxattn/v1/attention.proto is stale: run `python protos/generate.py`"
    )
    assert jaxattn.v1.PROTO.relative_to(jaxattn.v1.PROTO_ROOT).as_posix() == (
        "jaxattn/v1/attention.proto"
    )


@pytest.mark.slow
def test_wheel_holds_the_whole_package(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    packaged = {n for n in names if ".dist-info/" not in n}
    expected = source_files()
    assert expected - packaged == set(), "missing from the wheel: declare them package data"
    assert packaged - expected == set(), "in the wheel but not in the sources"
    for needed in (
        "jaxattn/views/static/core.js",
        "jaxattn/views/static/style.css",
        "jaxattn/inputs/data/ud-english-ewt/en_ewt-ud-dev.conllu",
        "jaxattn/inputs/data/ud-english-ewt/LICENSE.txt",
        "jaxattn/v1/attention.proto",
        "jaxattn/v1/attention_pb2.py",
    ):
        assert needed in packaged
    assert "jaxattn = jaxattn.cli:main" in entry_points
    assert client_requirements(meta), "the wheel's metadata has no client extra"


def client_requirements(metadata: str) -> list[str]:
    """The requirements of the `client` extra, as the wheel's METADATA lists them."""
    out = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:") and ";" in line:
            req, marker = line.removeprefix("Requires-Dist:").split(";", 1)
            if marker.replace("'", '"').split() == ["extra", "==", '"client"']:
                out.append(req.strip())
    return out


def fresh_venv(path: Path) -> Path:
    """A new virtual environment without pip (this environment's pip installs into it)."""
    try:
        venv.create(path, with_pip=False, symlinks=os.name != "nt")
    except Exception as e:  # noqa: BLE001 - any failure to create one is the skip reason
        pytest.skip(f"cannot create a virtual environment here: {e}")
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    if not python.exists():
        pytest.skip(f"venv created no interpreter at {python}")
    return python


CLIENT = """
import importlib.util, json, sys
assert importlib.util.find_spec("jax") is None, "jax is importable in the client-only venv"
import jaxattn, jaxattn.v1
from jaxattn import analysis, views
from jaxattn.client import AttentionClient
from jaxattn.inputs import SAMPLE_CORPUS, read_records

with AttentionClient(ADDRESS) as client:
    info = client.model_info()
    caps = client.capture(TEXTS, what=WHAT, codec="zstd")
caps[1].save(OUT + "/pair.npz")
page = views.build_html(caps)                       # the views' static files
record = next(iter(read_records(SAMPLE_CORPUS)))    # the sample corpus
stats = analysis.head_statistics(caps[0].attention, caps[0].tokens)
print(json.dumps({
    "jaxattn": jaxattn.__file__, "model": info.name, "tokens": caps[1].tokens,
    "page": len(page), "sentence": record.text,
    "licence": (SAMPLE_CORPUS.parent / "LICENSE.txt").is_file(),
    "proto": jaxattn.v1.PROTO.read_text(encoding="utf-8"),
    "heavy": sorted(m for m in ("jax", "flax", "torch", "transformers") if m in sys.modules),
}))
"""


@pytest.mark.slow
def test_client_only_install_captures_through_a_server(wheel, engines, tmp_path):
    from service import create_server

    python = fresh_venv(tmp_path / "venv")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith("METADATA"))).decode()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, env=env, timeout=120)
    subprocess.run([*pip, *client_requirements(meta)], check=True, env=env, timeout=300)

    engine = engines["bert"]
    server, port = create_server(engine, "127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    texts = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)]
    values = {"ADDRESS": address, "TEXTS": texts, "WHAT": WHAT, "OUT": str(tmp_path)}
    script = CLIENT
    for name, value in values.items():
        script = script.replace(name, repr(value))
    cli = str(python.with_name("jaxattn"))

    def run(*args: str) -> str:
        done = subprocess.run(
            args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{args[:3]}: {done.stderr}"
        return done.stdout

    try:
        got = json.loads(run(str(python), "-c", script))
        run(cli, "capture", "--server", address, EXAMPLE_A, "--out", "cli.npz")
        run(cli, "view", "cli.npz", "--out", "cli.html")
    finally:
        server.stop(grace=1).wait()

    assert Path(got["jaxattn"]).is_relative_to(tmp_path / "venv"), "not the installed wheel"
    assert got["heavy"] == [], f"the client imported {got['heavy']}"
    assert got["model"] == engine.model_info().name
    assert got["page"] > 10_000 and got["licence"] and got["sentence"]
    assert got["proto"] == (ROOT / "protos/jaxattn/v1/attention.proto").read_text("utf-8")
    import jaxattn

    (local,) = engine.capture([(EXAMPLE_A, EXAMPLE_B)], what=WHAT)
    remote = jaxattn.Capture.load(tmp_path / "pair.npz")
    assert tuple(got["tokens"]) == local.tokens == remote.tokens
    np.testing.assert_allclose(remote.attention, local.attention, atol=1e-6)
    np.testing.assert_allclose(remote.alpha_fx_norm, local.alpha_fx_norm, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "cli.html").stat().st_size > 10_000
