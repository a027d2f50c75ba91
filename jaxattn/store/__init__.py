"""Corpus stores: zarr v3 through TensorStore, written by `jaxattn dump`.

    import jaxattn
    store = jaxattn.open_store("ewt.zarr")      # no jax needed
    len(store)                                  # examples, in input order
    cap = store[3]                              # the Capture the engine returned
    store.entries[3].id, store.entries[3].line  # manifest: id, source line, tokens...
    store.metadata["model"], store.metadata["spec"]

The layout (STORE.md at the repository root): one group per quantity, one 1-D
zarr array per (quantity, shard) holding the shard's examples flattened and
concatenated, and one manifest part per shard giving each example's offset.

Modules: `layout` (paths, array metadata), `kvstore` (the root as a TensorStore
kvstore), `metadata` (what a store holds; resume checks), `manifest` (parts),
`writer` (one shard), `reader` (`open_store`).
"""

from jaxattn.store.reader import Store, open_store

__all__ = ["Store", "open_store"]
