"""docs/errors.md: "Every error jaxattn raises is a jaxattn.JaxattnError", except the
built-in classes Python code expects of files, imports, attributes and indexing, and
the internal errors a bug alone can trip. The source is read, not run: a new bare
`raise ValueError(...)` anywhere in jaxattn/ or service/ fails here, naming the place."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jaxattn", "service")

# Built-in classes jaxattn may raise, and why.
ALLOWED = {
    "FileNotFoundError": "a missing file, as Python code expects (docs/errors.md)",
    "IsADirectoryError": "a directory where a file belongs (docs/errors.md)",
    "NotADirectoryError": "a file where a directory belongs (docs/errors.md)",
    "AttributeError": "a module's or a Capture's __getattr__",
    "IndexError": "store[i] out of range: the sequence protocol",
    "ImportError": "an optional extra that is not installed",
    "KeyboardInterrupt": "the CLI's second Ctrl-C",
    "RuntimeError": "an internal check only a bug can trip ('internal error')",
    "AssertionError": "an internal check only a bug can trip ('internal error')",
    "NotImplementedError": "an internal check only a bug can trip ('internal error')",
}
# Where a bare ValueError or TypeError is still right: (file, function) -> why.
EXCEPTIONS = {
    ("jaxattn/store/selection.py", "position"): "TypeError: store['x'], Python's indexing rule",
    ("service/main.py", "_check_warmup"): "TypeError: ServerOptions.warmup of the wrong type",
}


def raised_builtins(path: Path) -> list[tuple[str, str, int]]:
    """(class, enclosing function, line) of each `raise` of a built-in class in `path`."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = (
                child.name
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                else function
            )
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and isinstance(getattr(builtins, exc.id, None), type):
                    found.append((exc.id, function, child.lineno))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path.relative_to(ROOT).as_posix(), path


def test_jaxattn_raises_its_own_classes_not_bare_builtins():
    wrong, used = [], set()
    for name, path in sources():
        for cls, function, line in raised_builtins(path):
            if cls in ALLOWED:
                continue
            if cls in ("ValueError", "TypeError") and (name, function) in EXCEPTIONS:
                used.add((name, function))
                continue
            wrong.append(f"{name}:{line} ({function or 'module'}) raises {cls}")
    assert not wrong, (
        "raise a jaxattn.errors class (UsageError, InputError, CheckpointError, "
        "CaptureFileError, WireError, ...; RuntimeError for a check only a bug can trip): "
        + "; ".join(wrong)
    )
    assert used == set(EXCEPTIONS), f"exceptions no longer needed: {set(EXCEPTIONS) - used}"


def test_the_check_sees_a_bare_value_error(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "def f(x):\n    if x:\n        raise ValueError('x')\n    raise UsageError('y')\n"
        "class C:\n    async def g(self):\n        raise TypeError\n"
    )
    assert raised_builtins(source) == [("ValueError", "f", 3), ("TypeError", "g", 7)]
