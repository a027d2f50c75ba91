"""HF state dict -> jaxattn params, driven by the family's tables (`checkpoints.families`).

HF's parameter names live only in the family files. The conversion is total: a
weight the model needs and the checkpoint lacks raises naming it, and so does a
checkpoint weight that nothing maps (except the family's `ignored`, each with a
reason).

Params layout (linen): {"encoder": Encoder params, "pooler": ..., "mlm_head": ...,
"lm_head": ...}; the last three only when the checkpoint has them.
"""

from __future__ import annotations

import re

import numpy as np

from jaxattn.checkpoints.families import FAMILIES
from jaxattn.checkpoints.family import DIMS, Family, as_float32, letters, size
from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError


def _normalise_key(key: str) -> str:
    # Old TF-converted BERT checkpoints name LayerNorm params gamma/beta.
    return key.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias"
    )


def _set(tree: dict, path: str, value) -> None:
    *parents, leaf = path.split("/")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def convert_state_dict(
    state: dict[str, np.ndarray],
    config: ModelConfig,
    *,
    config_file: str = "config.json",
    consume: bool = False,
) -> dict:
    """Map a HF state dict onto the jaxattn params tree.

    Every tensor's presence and shape is checked against what the config implies
    before any is reshaped, so a config that does not belong to the weights is
    named as such rather than failing inside a reshape.

    Args:
      state: HF parameter name -> array (any float dtype).
      config: the translated config.
      config_file: the config's file, for messages.
      consume: empty `state`, each tensor let go once converted (the loader's: a
        bfloat16 checkpoint's tensors, cast to float32 one at a time, are not all held
        beside their casts).

    Returns:
      The params tree (float32 numpy leaves; where jax places on the CPU each
      C-contiguous and 64-byte aligned, `jaxattn.engine.aligned.placeable`, so that the
      placement shares their memory).

    Raises:
      CheckpointError (a ValueError): naming a missing weight (and counting the
        others missing), a weight whose shape the config contradicts (both
        shapes), an unused weight, or a tied decoder weight that differs from the
        word embedding.
    """
    from jaxattn.engine.aligned import placeable

    family = FAMILIES[config.family]
    given, state = state, {_normalise_key(k): v for k, v in state.items()}
    if consume:
        given.clear()
    prefix = next((p for p in family.prefixes if any(k.startswith(p) for k in state)), "")
    plan = _plan(state, config, family, prefix)
    _check_present(plan, state, config_file)
    _check_shapes(plan, state, config, family, config_file)
    tied = family.tied
    used = {key for _, key, _, _ in plan} | ({tied} & set(state))
    _check_unused(state, used, prefix, config, family, config_file)
    params: dict = {}
    last = {key: i for i, (_, key, _, _) in enumerate(plan)}  # GPT-2's c_attn: three uses
    for i, (path, key, fn, _) in enumerate(plan):
        _set(params, path, placeable(fn(as_float32(state[key]), config)))
        if consume and last[key] == i and key != tied:
            del state[key]
    if tied in state and not np.array_equal(
        as_float32(state[tied]), params["encoder"]["embeddings"]["word"]
    ):
        raise CheckpointError(
            f"weight {tied} is not tied to the word embedding; jaxattn needs it tied"
        )
    return params


def _plan(state: dict, config: ModelConfig, family: Family, prefix: str) -> list[tuple]:
    """(our path, HF key, transform, HF dims) of every tensor the params need.

    Encoder entries whose param the model does not have (a bias switched off,
    a projection that E == D makes unnecessary) are left out.
    """
    from jaxattn.engine.params import expected_paths

    plan: list[tuple] = []

    def take(path: str, module: str, kind: str, dims: str) -> list[tuple]:
        rows = []
        for ours, (leaf, fn, rank) in family.kind(kind).items():
            key = f"{module}.{leaf}" if leaf else module
            rows.append((f"{path}/{ours}" if ours else path, key, fn, letters(dims, rank)))
        return rows

    wanted = {f"encoder/{p}" for p in expected_paths(config)}
    encoder = []
    for path, (module, kind, dims) in family.model.items():
        encoder += take(f"encoder/{path}", prefix + module, kind, dims)
    for i in range(config.weight_layers):
        base = prefix + family.layer_key.format(i)
        for path, (module, kind, dims) in family.layer.items():
            encoder += take(f"encoder/layer_{i}/{path}", base + module, kind, dims)
    plan += [row for row in encoder if row[0] in wanted]
    covered = {row[0] for row in plan}
    if wanted - covered:  # a family table that forgets a param is a bug of jaxattn's
        raise AssertionError(f"family {family.name} maps no weight to {sorted(wanted - covered)}")
    groups = (("pooler", family.pooler, prefix), ("mlm_head", family.mlm, ""))
    for group, table, pfx in (*groups, ("lm_head", family.lm, "")):
        rows = [r for p, (m, k, d) in table.items() for r in take(f"{group}/{p}", pfx + m, k, d)]
        if any(key in state for _, key, _, _ in rows):
            plan += rows
    return plan


def _check_present(plan: list[tuple], state: dict, config_file: str) -> None:
    """Raise naming the first tensor the plan needs and the state lacks, counting the rest."""
    missing = [key for _, key, _, _ in plan if key not in state]
    if missing:
        more = f" and {len(missing) - 1} more tensor(s)" if len(missing) > 1 else ""
        raise CheckpointError(
            f"the weights lack {missing[0]!r}{more} that {config_file} implies "
            "(does it belong to these weights?)"
        )


def _check_shapes(plan, state: dict, config: ModelConfig, family: Family, config_file: str):
    """Raise naming the first tensor whose shape the config contradicts, with both shapes."""
    for _, key, _, dims in plan:
        want = tuple(size(config, d) for d in dims)
        have = tuple(np.shape(state[key]))
        if have != want:
            fields = dict.fromkeys(DIMS[d] for d in dims)  # in order, once each
            said = ", ".join(f"{family.hf_field(f)}={getattr(config, f)}" for f in fields)
            raise CheckpointError(
                f"weight {key} has shape {have} but {config_file} ({said}) implies {want}"
            )


def _check_unused(state, used, prefix: str, config: ModelConfig, family: Family, config_file):
    """Raise naming the checkpoint's tensors that nothing maps (the family's ignored aside)."""
    ignored = {k for k in state if k.removeprefix(prefix) in family.ignored}
    if family.layer_ignored:
        layer = re.compile(re.escape(prefix + family.layer_key).replace(r"\{\}", r"\d+"))
        ignored |= {
            k for k in state if (m := layer.match(k)) and k[m.end() :] in family.layer_ignored
        }
    unused = sorted(set(state) - used - ignored)
    if not unused:
        return
    shown = ", ".join(repr(k) for k in unused[:8])
    more = f" and {len(unused) - 8} more" if len(unused) > 8 else ""
    extra_layer = prefix + family.layer_key.format(config.weight_layers)
    hint = (
        f" ({config_file} says {family.layers_field}={config.weight_layers}, the weights have "
        "more layers)"
        if any(k.startswith(extra_layer) for k in unused)
        else ""
    )
    raise CheckpointError(f"the checkpoint has weight(s) jaxattn does not use: {shown}{more}{hint}")
