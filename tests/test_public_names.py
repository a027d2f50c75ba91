"""The top-level names: every one in `jaxattn.__all__` resolves, the subpackages users reach
for are attributes after a plain `import jaxattn`, and neither imports jax."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jaxattn


def test_every_public_name_resolves_and_errors_are_jaxattn_errors():
    for name in jaxattn.__all__:
        assert getattr(jaxattn, name) is not None, name
    hub_errors = (
        "ModelNotFoundError",
        "NotAModelDirectoryError",
        "HubError",
        "HubUnreachableError",
        "GatedModelError",
    )
    for name in hub_errors:
        assert issubclass(getattr(jaxattn, name), jaxattn.JaxattnError), name
    assert issubclass(jaxattn.ModelNotFoundError, FileNotFoundError)


def test_subpackages_are_attributes_without_jax():
    script = textwrap.dedent("""
        import sys, jaxattn
        for name in ("analysis", "client", "inputs", "views"):
            assert getattr(jaxattn, name).__name__ == "jaxattn." + name
        try:
            jaxattn.no_such_name
        except AttributeError as e:
            assert "no_such_name" in str(e)
        print("jax" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
