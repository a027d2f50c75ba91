"""Optional nonlinear 2-D layouts of one head's normalised query/key cloud (t-SNE, UMAP).

The PCA map (`jaxattn.engine.qk_map`) is always made; ``--global-reducer tsne``
adds openTSNE's t-SNE (the ``layout`` extra: ``pip install 'jaxattn[layout]'``) and
``umap`` umap-learn's UMAP (``pip install umap-learn``), both started from the PCA
coordinates. Measured on one MiniLM head (20,000 points, 32 dims, 2 shared CPU
cores; 10-NN kept / trustworthiness): PCA 0 s, 4% / 0.896; openTSNE 97 s, 46% /
0.977; scikit-learn TSNE 130 s, 47% / 0.976; UMAP 74 s, 24% / 0.960. See
docs/global-view.md.
"""

from __future__ import annotations

import importlib

import numpy as np

from jaxattn.errors import UsageError

# reducer -> (module, package, install command); "pca" needs nothing
REDUCERS = {
    "pca": None,
    "tsne": ("openTSNE", "openTSNE", "pip install 'jaxattn[layout]'"),
    "umap": ("umap", "umap-learn", "pip install umap-learn"),
}
CLASSES = {"tsne": "TSNE", "umap": "UMAP"}  # what each module must have


def check_reducer(name: str):
    """The reducer's module (None for PCA).

    Raises:
      UsageError: an unknown name, or its package is not installed (the install command).
    """
    if name not in REDUCERS:
        raise UsageError(f"--global-reducer {name}: choose one of {', '.join(REDUCERS)}")
    if REDUCERS[name] is None:
        return None
    module, package, install = REDUCERS[name]
    try:
        found = importlib.import_module(module)
        if hasattr(found, CLASSES[name]):
            return found
    except ImportError:
        pass
    raise UsageError(
        f"--global-reducer {name} needs {package}: {install} (or use --global-reducer pca)"
    )


def reduce(name: str, cloud: np.ndarray, init: np.ndarray, seed: int = 0) -> np.ndarray:
    """The 2-D layout [n, 2] float32 of `cloud` [n, K] by `name`, started from `init` [n, 2]
    (the PCA coordinates, rescaled as each library expects)."""
    module = check_reducer(name)
    x = np.ascontiguousarray(cloud, np.float64)
    start = np.asarray(init, np.float64)
    start = (start - start.mean(0)) / max(float(start[:, 0].std()), 1e-12)
    if name == "tsne":
        perplexity = float(min(30.0, max(1.0, (len(x) - 1) / 3.5)))
        tsne = module.TSNE(
            perplexity=perplexity,
            initialization=start * 1e-4,
            random_state=seed,
            n_jobs=-1,
            verbose=False,
        )
        return np.asarray(tsne.fit(x), np.float32)
    umap = module.UMAP(
        n_neighbors=min(15, len(x) - 1), init=start * 10, random_state=seed, n_jobs=1
    )
    return np.asarray(umap.fit_transform(x), np.float32)


def reduce_heads(name, maps, queries, keys, pca, shape, seed: int = 0, say=None):
    """`reduce` of every head: (queries, keys) [L, H, n, 2] float32 of the kept tokens'
    `queries`, `keys` [L, H, n, K] under `maps` (`qk_map.HeadMaps`), started from `pca`
    (the PCA coordinates' (queries, keys)); `shape` (layer indices, head indices) and
    `say` (a callable, or None) report progress per head."""
    from jaxattn.engine.qk_map import normalised_cloud

    L, H, n, _ = queries.shape
    xq, xk = pca
    lq, lk = np.empty_like(xq), np.empty_like(xk)
    for g in range(L * H):
        a, b = divmod(g, H)
        cloud = normalised_cloud(maps, g, queries[a, b], keys[a, b])
        if say is not None:
            say(f"{name}: layer {shape[0][a]} head {shape[1][b]} ({g + 1}/{L * H}, {2 * n} points)")
        out = reduce(name, cloud, np.concatenate([xq[a, b], xk[a, b]]), seed)
        lq[a, b], lk[a, b] = out[:n], out[n:]
    return lq, lk
