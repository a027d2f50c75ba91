"""The joint query-key map of every head (AttentionViz): streamed moments, normalisation, PCA.

    stream = MomentStream()
    for cap in captures:                      # any number: memory is K x K per head
        stream.add(cap.queries, cap.keys)     # [L, H, T, K] of one example
    fit = fit_map(stream.moments())           # per head: the transform and its 2-D basis
    xy_q, xy_k = project(fit, q, k)           # [L, H, n, 2] of any tokens kept aside

Per head, the softmax of a query q over keys k_j is unchanged when one vector is
added to every key (q.(k_j + v) = q.k_j + q.v, the same for every j) and when q
is scaled by c and every key by 1/c. The normalised cloud is q'' = c q and
k'' = (k - mean_k) / c + c mean_q (keys scaled by 1/c, then all translated by one
vector): both clouds have the centroid c mean_q, and c is chosen so that their
root-mean-square norms are equal: c^2 E|q|^2 = tr Cov(k) / c^2 + c^2 |mean_q|^2,
i.e. c = (tr Cov(k) / tr Cov(q))^(1/4). The joint cloud {q''} U {k''} is then
reduced to 2-D by PCA: the two leading eigenvectors of its covariance,
(c^2 Cov(q) + Cov(k) / c^2) / 2 (equal counts, one centroid). Moments (count,
sums, K x K second moments of q and k) are summed per batch by a jitted function
on the default device, in float32 over at most `BATCH_TOKENS` tokens, and
combined on the host in float64.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.engine.precision import HIGHEST
from jaxattn.errors import InputError

BATCH_TOKENS = 1024  # tokens per jitted moments call (one compiled shape; padding masked)


@dataclasses.dataclass
class Moments:
    """Streamed statistics of one corpus, per head (G = layers x heads, float64).

    Attributes:
      count: [G] tokens seen (queries and keys alike).
      sum_q, sum_k: [G, K] sums of the query / key vectors.
      sq_q, sq_k: [G, K, K] sums of their outer products (uncentred second moments).
    """

    count: np.ndarray
    sum_q: np.ndarray
    sum_k: np.ndarray
    sq_q: np.ndarray
    sq_k: np.ndarray


@jax.jit
def _batch_moments(q, k, mask):
    """Sums over the N axis of q, k [G, N, K] where `mask` [N] is 1."""
    m = mask.astype(jnp.float32)[None, :, None]
    qm, km = q * m, k * m
    return (
        jnp.sum(mask.astype(jnp.float32)),
        qm.sum(1),
        km.sum(1),
        jnp.einsum("gnk,gnj->gkj", qm, q, precision=HIGHEST),
        jnp.einsum("gnk,gnj->gkj", km, k, precision=HIGHEST),
    )


class MomentStream:
    """Accumulates `Moments` over examples of any length, `BATCH_TOKENS` tokens per call."""

    def __init__(self, batch_tokens: int = BATCH_TOKENS):
        self.batch_tokens = batch_tokens
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._buffered = 0
        self._total: Moments | None = None
        self.shape: tuple[int, int, int] | None = None  # (L, H, K)

    def add(self, queries: np.ndarray, keys: np.ndarray) -> None:
        """Add one example's queries and keys, [L, H, T, K] (real tokens only)."""
        q, k = np.asarray(queries, np.float32), np.asarray(keys, np.float32)
        L, H, T, K = q.shape
        if self.shape is None:
            self.shape = (L, H, K)
        elif self.shape != (L, H, K):
            raise InputError(
                None,
                f"an example has {L} layers x {H} heads x {K} dims, the "
                f"others {self.shape}: give captures of one model and "
                "selection",
            )
        for a in range(0, T, self.batch_tokens):  # long examples: several batches
            part = (q[:, :, a : a + self.batch_tokens], k[:, :, a : a + self.batch_tokens])
            if self._buffered + part[0].shape[2] > self.batch_tokens:
                self._flush()
            self._parts.append(part)
            self._buffered += part[0].shape[2]

    def _flush(self) -> None:
        if not self._buffered:
            return
        L, H, K = self.shape
        n = self.batch_tokens
        q = np.zeros((L * H, n, K), np.float32)
        k = np.zeros_like(q)
        mask = np.zeros(n, bool)
        at = 0
        for pq, pk in self._parts:
            t = pq.shape[2]
            q[:, at : at + t] = pq.reshape(L * H, t, K)
            k[:, at : at + t] = pk.reshape(L * H, t, K)
            at += t
        mask[:at] = True
        out = [np.asarray(x, np.float64) for x in _batch_moments(q, k, mask)]
        part = Moments(np.full(L * H, out[0]), *out[1:])
        if self._total is None:
            self._total = part
        else:
            for f in dataclasses.fields(Moments):
                setattr(self._total, f.name, getattr(self._total, f.name) + getattr(part, f.name))
        self._parts, self._buffered = [], 0

    def moments(self) -> Moments:
        """The moments of everything added so far.

        Raises:
          InputError: nothing was added.
        """
        self._flush()
        if self._total is None:
            raise InputError(None, "no token to lay out: give at least one non-empty text")
        return self._total


@dataclasses.dataclass(frozen=True)
class HeadMaps:
    """Per head (G = layers x heads) the normalising transform and the PCA basis (float64).

    Attributes:
      mean_q, mean_k: [G, K] centroids of the queries and keys.
      scale: [G] c: queries are scaled by c, keys by 1/c (1 where a cloud has no spread).
      centre: [G, K] centroid of the joint normalised cloud (and of each of its two
        clouds): c mean_q.
      basis: [G, K, 2] its two leading principal axes (columns; sign: the largest
        entry of each is positive).
      explained: [G, 2] fraction of the joint cloud's variance along each axis.
    """

    mean_q: np.ndarray
    mean_k: np.ndarray
    scale: np.ndarray
    centre: np.ndarray
    basis: np.ndarray
    explained: np.ndarray


def normalise(q, k, mean_q, mean_k, scale):
    """(c q, (k - mean_k) / c + c mean_q) of one head (numpy or jax arrays, [..., K])."""
    return scale * q, (k - mean_k) / scale + scale * mean_q


def fit_map(m: Moments) -> HeadMaps:
    """The transform and 2-D PCA basis of every head from the corpus's moments.

    Raises:
      InputError: fewer than 3 points (query and key vectors together) or K < 2.
    """
    n = m.count[:, None]
    K = m.sum_q.shape[-1]
    if 2 * int(m.count.min()) < 3 or K < 2:
        raise InputError(
            None,
            f"a 2-D layout needs at least 3 points and 2 dimensions; the "
            f"corpus gives {2 * int(m.count.min())} points (queries and keys) of "
            f"{K} dimension(s): give more or longer texts, or a model with "
            "head size >= 2",
        )
    mean_q, mean_k = m.sum_q / n, m.sum_k / n
    cov_q = m.sq_q / n[..., None] - np.einsum("gk,gj->gkj", mean_q, mean_q)
    cov_k = m.sq_k / n[..., None] - np.einsum("gk,gj->gkj", mean_k, mean_k)
    var_q = np.trace(cov_q, axis1=1, axis2=2)  # tr Cov = E|x|^2 - |mean|^2
    var_k = np.trace(cov_k, axis1=1, axis2=2)
    ok = (var_q > 0) & (var_k > 0)
    scale = np.where(ok, (np.where(ok, var_k, 1.0) / np.where(ok, var_q, 1.0)) ** 0.25, 1.0)
    c2 = (scale**2)[:, None, None]
    centre = mean_q * scale[:, None]  # both clouds' centroid
    joint = (c2 * cov_q + cov_k / c2) / 2  # equal counts around one centroid
    values, vectors = np.linalg.eigh(joint)
    basis = vectors[:, :, ::-1][:, :, :2]
    rows = np.abs(basis).argmax(1)
    signs = np.sign(np.take_along_axis(basis, rows[:, None, :], 1))
    basis = basis * np.where(signs == 0, 1.0, signs)
    total = np.clip(values.sum(-1, keepdims=True), 1e-300, None)
    explained = np.clip(values[:, ::-1][:, :2], 0, None) / total
    return HeadMaps(mean_q, mean_k, scale, centre, basis, explained)


@jax.jit
def _project(q, k, mean_q, mean_k, scale, centre, basis):
    s = scale[:, None, None]
    nq, nk = normalise(q, k, mean_q[:, None], mean_k[:, None], s)
    xq = jnp.einsum("gnk,gkd->gnd", nq - centre[:, None], basis, precision=HIGHEST)
    xk = jnp.einsum("gnk,gkd->gnd", nk - centre[:, None], basis, precision=HIGHEST)
    return xq, xk


def project(
    maps: HeadMaps, queries: np.ndarray, keys: np.ndarray, chunk: int = BATCH_TOKENS
) -> tuple[np.ndarray, ...]:
    """The 2-D coordinates of queries and keys [L, H, n, K] in each head's map: two
    float32 [L, H, n, 2] (jitted on the default device, `chunk` tokens per call)."""
    L, H, n, K = queries.shape
    f = np.float32
    fixed = [np.asarray(getattr(maps, a), f) for a in ("mean_q", "mean_k", "scale", "centre")]
    fixed.append(np.asarray(maps.basis, f))
    out = np.empty((2, L * H, n, 2), f)
    size = min(chunk, n)
    for a in range(0, n, size):
        part = []
        for x in (queries, keys):
            block = np.zeros((L * H, size, K), f)  # the last chunk padded: one compiled shape
            piece = np.asarray(x[:, :, a : a + size], f)
            block[:, : piece.shape[2]] = piece.reshape(L * H, -1, K)
            part.append(block)
        xq, xk = _project(*part, *fixed)
        m = min(size, n - a)
        out[0, :, a : a + m], out[1, :, a : a + m] = np.asarray(xq)[:, :m], np.asarray(xk)[:, :m]
    return out[0].reshape(L, H, n, 2), out[1].reshape(L, H, n, 2)


def normalised_cloud(maps: HeadMaps, g: int, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Head `g`'s normalised vectors [2n, K] (queries then keys, float32): the input
    of a nonlinear reducer."""
    nq, nk = normalise(queries, keys, maps.mean_q[g], maps.mean_k[g], maps.scale[g])
    return np.concatenate([nq, nk]).astype(np.float32)
