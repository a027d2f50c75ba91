"""The module paths of jaxattn 0.1, importable for one more release (until 0.3).

jaxattn 0.2 gave every stage a folder (CHANGELOG.md, 0.2.0). An import of
an old path gets the module at its new place, with a DeprecationWarning naming
it, so `from jaxattn.ablation import HeadAblation` keeps working meanwhile.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

# old module path -> new module path
MOVED = {
    "jaxattn.ablation": "jaxattn.engine.ablation",
    "jaxattn.batching": "jaxattn.engine.batching",
    "jaxattn.device_encode": "jaxattn.engine.quantize",
    "jaxattn.mlm": "jaxattn.engine.mlm",
    "jaxattn.model": "jaxattn.engine.model",
    "jaxattn.norms": "jaxattn.engine.norms",
    "jaxattn.params": "jaxattn.engine.params",
    "jaxattn.precision": "jaxattn.engine.precision",
    "jaxattn.tokenize": "jaxattn.engine.tokenize",
    "jaxattn.encodings": "jaxattn.dtypes",
    "jaxattn.loading": "jaxattn.checkpoints.loading",
    "jaxattn.convert": "jaxattn.checkpoints",
    "jaxattn.convert.hf_config": "jaxattn.checkpoints.hf_config",
    "jaxattn.convert.hf_files": "jaxattn.checkpoints.hf_files",
    "jaxattn.convert.hf_weights": "jaxattn.checkpoints.hf_weights",
    "jaxattn.convert.native": "jaxattn.checkpoints.native",
    "jaxattn.analysis.conllu": "jaxattn.inputs.conllu",
    "jaxattn.client.expect": "jaxattn.bench.expect",
    "jaxattn.client.loadtest": "jaxattn.bench.load_generator",
    "jaxattn.wire.encode": "jaxattn.wire.send",
    "jaxattn.wire.decode": "jaxattn.wire.receive",
    "jaxattn.dump.inputs": "jaxattn.inputs.formats",
    "jaxattn.dump.plan": "jaxattn.dump.sharding",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names and hands back the module at its new place."""

    def __init__(self):
        self._real_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new} in jaxattn 0.2; the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,  # importlib's own frames are skipped: this names the importer
        )
        module = importlib.import_module(new)
        self._real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        """Nothing to run; only undo what importlib did to the module.

        importlib sets ``module.__spec__`` to the alias's spec after
        `create_module`; the real spec goes back, so `importlib.reload`,
        `importlib.resources` and `find_spec` keep seeing the module as it is.
        """
        module.__spec__ = self._real_specs.pop(module.__spec__.name)


def install() -> None:
    """Put the alias finder on `sys.meta_path` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())  # before PathFinder: an old package path
        # (jaxattn.convert) would otherwise load second copies of its submodules
