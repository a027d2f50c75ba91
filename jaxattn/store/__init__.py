"""Corpus stores: zarr v3 through TensorStore, written by `jaxattn dump`.

    import jaxattn
    store = jaxattn.open_store("ewt.zarr")      # no jax needed
    len(store)                                  # examples, in input order
    cap = store[3]                              # the Capture the engine returned
    store[-1], store[1:3], store[::2]           # a sequence: lazy slices (StoreSelection)
    store.entries[3].id, store.entries[3].line  # manifest: id, source line, tokens...
    store.metadata["model"], store.metadata["spec"]

The layout (STORE.md at the repository root): one group per quantity, one 1-D
zarr array per (quantity, shard) holding the shard's examples flattened and
concatenated, and one manifest part per shard giving each example's offset.

Modules: `layout` (paths, array metadata), `kvstore` (the root as a TensorStore
kvstore), `metadata` (what a store holds; resume checks), `manifest` (parts),
`writer` (one shard), `reader` (`open_store`), `selection` (indices and lazy
slices), `location` (what is at a path: `open_store`'s and `jaxattn dump`'s
checks). Errors: `jaxattn.errors.CaptureFileError` (TensorStore's own included,
shortened to one line), `metadata.StoreMismatch` (a UsageError).
"""

from jaxattn.store.reader import Store, open_store
from jaxattn.store.selection import StoreSelection

__all__ = ["Store", "StoreSelection", "open_store"]
