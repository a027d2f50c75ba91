"""Store metadata: what a store holds and the command that wrote it.

The metadata lives in the root group's zarr.json (``attributes["jaxattn"]``).
Its *identity* fields (model fingerprint, spec, generation, input fingerprint,
sharding, too-long policy, array encoding) decide whether a dump command may continue an
existing store: a resumed job must produce exactly what the first one would
have, so any difference is refused, naming each field that differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import CaptureFileError, UsageError
from jaxattn.info import jaxattn_version
from jaxattn.quantities import QUANTITIES
from jaxattn.store import layout
from jaxattn.store.kvstore import KeyValue

# (section, field) pairs compared on resume, with a human name for the message.
_IDENTITY = (
    (("format_version",), "store format version"),
    (("model", "fingerprint"), "model (checkpoint fingerprint)"),
    (("model", "name"), "model name"),
    (("model", "weights"), "model weights (fingerprint)"),
    (("spec", "what"), "quantities (--what)"),
    (("spec", "layers"), "layers (--layers)"),
    (("spec", "heads"), "heads (--heads)"),
    (("spec", "dtype"), "dtype (--dtype)"),
    (("spec", "precision"), "compute precision (--precision)"),
    (("spec", "query_positions"), "query positions (--query-positions)"),
    (("spec", "key_positions"), "key positions (--key-positions)"),
    (("generate", "max_new_tokens"), "generated tokens (--generate)"),
    (("generate", "stop_at_eos"), "stop at an end-of-sequence token (--ignore-eos turns it off)"),
    (("input", "format"), "input format"),
    (("input", "sha256"), "input (content fingerprint)"),
    (
        ("input", "reader"),
        "input reader (jaxattn 0.2 reads 'A ||| B' pairs, strips white space; "
        "0.3 refuses empty texts)",
    ),
    (
        ("spec", "entropy"),
        "an encoder's decoder statistics' entropy (jaxattn 0.3 takes every real key of a "
        "row; stores before it recorded nothing and summed the keys up to the row only)",
    ),
    (("input", "limit"), "record limit (--limit)"),
    (("shards", "size"), "shard size (--shard-size)"),
    (("too_long",), "too-long policy (--too-long)"),
    (("chunk_bytes",), "chunk size"),
    (("codec",), "codec"),
)


# Fields every store's metadata has; a store without one is damaged.
_REQUIRED = (
    ("format_version",),
    ("model", "name"),
    ("spec", "what"),
    ("spec", "layers"),
    ("spec", "heads"),
    ("spec", "dtype"),
    ("shards", "count"),
    ("input", "records"),
)


def _count(value) -> bool:
    return type(value) is int and value >= 0


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(q, str) for q in value)


def _indices(value) -> bool:
    return isinstance(value, list) and all(map(_count, value))


def _dtype(value) -> bool:
    return isinstance(value, str) and value in OUTPUT_DTYPES


def _text(value) -> bool:
    return value is None or isinstance(value, str)


# Fields the reader relies on, with the kind it needs: (path, check, the kind in words).
_KINDS = (
    (("spec", "what"), _names, "a list of quantity names"),
    (("spec", "layers"), _indices, "a list of layer indices"),
    (("spec", "heads"), _indices, "a list of head indices"),
    (("spec", "dtype"), _dtype, f"one of {', '.join(OUTPUT_DTYPES)}"),
    (("spec", "precision"), _text, "a string"),
    (("shards", "count"), _count, "a whole number"),
    (("input", "records"), _count, "a whole number"),
)


class StoreMismatch(UsageError):
    """An existing store was written by a different command (a UsageError: exit 2).

    The message names each identity field that differs with both values.
    """


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputInfo:
    """What identifies a dump's input.

    Attributes:
      name: the file's name (informational; moving a file is allowed).
      format: text, jsonl or conllu.
      sha256: hex digest of the file's bytes.
      size: the file's size in bytes.
      records: examples (lines or sentences) in the file, unreadable ones
        included; with `limit`, at most `limit`.
      reader: how records were read into texts (`jaxattn.inputs.READER`): a
        resumed dump must read its input the same way.
      limit: only the first `limit` records were taken (``--limit``), or None
        for all; then `sha256` covers the bytes read up to the limit.
    """

    name: str
    format: str
    sha256: str
    size: int
    records: int
    reader: str
    limit: int | None = None


def build(
    *,
    model_info: dict,
    model_fingerprint: str,
    spec,
    model_config: dict | None = None,
    input_info: InputInfo,
    shard_size: int,
    too_long: str,
    chunk_bytes: int = layout.DEFAULT_CHUNK_BYTES,
    generate: int | None = None,
    stop_at_eos: bool = True,
) -> dict:
    """The metadata document of a store.

    Args:
      model_info: `ModelInfo` fields (name, family, layers, heads, hidden, head_dim,
        weights, revision...): ``model.revision`` records the Hugging Face Hub
        commit the weights were downloaded at ("" for a local directory; stores
        written before it lack it). It is not an identity field: the checkpoint
        and weights fingerprints decide whether a dump may resume.
      model_fingerprint: `jaxattn.dump.fingerprint.checkpoint_fingerprint` of the model.
      spec: the `CaptureSpec`.
      model_config: the `ModelConfig` as a dict (kept for the captures' provenance).
      input_info: the input's identity.
      shard_size: input records per shard.
      too_long: truncate, skip or error.
      chunk_bytes: uncompressed bytes per array chunk.
      generate: a decoder continued each text by up to this many greedily generated
        tokens before the capture (``--generate N``), recorded as ``generate``
        (``max_new_tokens``, ``stop_at_eos``); None: texts captured as they are (no
        ``generate`` section: such a store's metadata is as before the field).
      stop_at_eos: with `generate`: a continuation ended at an EOS token.
    """
    # A grouped-query model's keys/values (G axis): the key/value heads the heads read.
    sizes = layout.axis_sizes(
        layers=len(spec.layers),
        heads=len(spec.heads),
        head_dim=model_info["head_dim"],
        hidden=model_info["hidden"],
        kv_heads=len(spec.kv_axis),
        rows=None if spec.query_positions is None else len(spec.query_positions),
        keys=None if spec.key_positions is None else len(spec.key_positions),
    )
    # the maps' selected rows and keys, as asked (negative: from each example's end)
    positions = {
        field: list(getattr(spec, field))
        for field in ("query_positions", "key_positions")
        if getattr(spec, field) is not None
    }
    shards = -(-input_info.records // shard_size)
    # An encoder's decoder statistics (P axis): their entropy's keys, a definition that
    # changed (every real key of the row, not those up to it): recorded, so that a store
    # of the earlier definition is not continued with this one. Other stores as before.
    decoder_stats = any(QUANTITIES[q].axis("P") is not None for q in spec.what)
    entropy = (
        {"entropy": "every real key"} if decoder_stats and not model_info.get("causal") else {}
    )
    return {
        "format": layout.FORMAT,
        "format_version": layout.SELECTED_FORMAT_VERSION if positions else layout.FORMAT_VERSION,
        "jaxattn_version": jaxattn_version(),
        "model": {
            **model_info,
            "revision": model_info.get("revision", ""),
            "fingerprint": model_fingerprint,
            **({"config": model_config} if model_config is not None else {}),
        },
        "spec": {
            "what": list(spec.what),
            "layers": list(spec.layers),
            "heads": list(spec.heads),
            # grouped-query attention only: stores of the other models stay as they were
            **({"kv_heads": list(spec.kv_heads)} if spec.kv_heads else {}),
            "dtype": spec.dtype,
            "precision": spec.precision,
            **positions,
            **entropy,
        },
        "axes": {q: QUANTITIES[q].axes for q in spec.what},
        "sizes": sizes,
        "input": dataclasses.asdict(input_info),
        "shards": {"size": shard_size, "count": shards},
        **(
            {}
            if generate is None
            else {"generate": {"max_new_tokens": generate, "stop_at_eos": stop_at_eos}}
        ),
        "too_long": too_long,
        "chunk_bytes": chunk_bytes,
        "codec": layout.COMPRESSORS[spec.dtype],
    }


def _get(doc: dict, path: Sequence[str]):
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


# Identity fields stores of earlier versions lack, and the value they meant.
_IMPLIED = {("spec", "precision"): "highest"}
# Identity fields stores of earlier versions lack and nothing can imply: not compared then.
_UNRECORDED = {("model", "weights")}


def differences(existing: dict, new: dict) -> list[str]:
    """The identity fields that differ, as "name: store has X, this command Y" lines.

    A field an older store never recorded is not compared when nothing implies
    its value (the weights fingerprint: older stores lack it, and the checkpoint
    fingerprint still identifies their model).
    """
    out = []
    for path, name in _IDENTITY:
        old, now = _get(existing, path), _get(new, path)
        if old is None and path in _UNRECORDED:
            continue
        if old is None:
            old = _IMPLIED.get(path)
        if old != now:
            out.append(f"{name}: the store has {old!r}, this command gives {now!r}")
    return out


def read(kv: KeyValue) -> dict | None:
    """The metadata of the store at `kv`, or None when there is no zarr.json there.

    Raises:
      CaptureFileError: a zarr.json that is not a jaxattn store's, is damaged
        (not JSON, a required field missing), or of a format version this
        jaxattn does not read; the message names the location and what it found.
    """
    where = kv.location
    root = kv.read_json("zarr.json")
    if root is None:
        return None
    attributes = root.get("attributes") if isinstance(root, dict) else None
    meta = attributes.get("jaxattn") if isinstance(attributes, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != layout.FORMAT:
        found = "a zarr node" if isinstance(root, dict) and "zarr_format" in root else "a file"
        raise CaptureFileError(
            f"{where} is not a jaxattn store: its zarr.json is {found} without jaxattn "
            f"store metadata (attributes.jaxattn.format {layout.FORMAT!r})"
        )
    check_version(meta, where)
    missing = [".".join(path) for path in _REQUIRED if _get(meta, path) is None]
    if missing:
        raise CaptureFileError(
            f"the store at {where} is damaged: its metadata (zarr.json, attributes.jaxattn) "
            f"lacks {', '.join(missing)}"
        )
    for path, ok, words in _KINDS:
        if not ok(_get(meta, path)):
            raise CaptureFileError(
                f"the store at {where} is damaged: its metadata's {'.'.join(path)} is "
                f"{str(_get(meta, path))[:60]!r}, not {words}"
            )
    return meta


def check_version(meta: dict, where: str) -> None:
    """Refuse a store format this jaxattn does not read, saying which it found.

    Raises:
      CaptureFileError: naming both versions and what to do.
    """
    found = meta.get("format_version")
    readable = layout.READABLE_VERSIONS
    if found in readable and not isinstance(found, bool):
        return
    if isinstance(found, int) and not isinstance(found, bool) and found > max(readable):
        raise CaptureFileError(
            f"the store at {where} has format version {found}, newer than this jaxattn "
            f"({jaxattn_version()}) reads ({', '.join(map(str, readable))}): upgrade jaxattn "
            "to read it"
        )
    raise CaptureFileError(
        f"the store at {where} has format version {found!r}; this jaxattn reads versions "
        f"{', '.join(map(str, readable))} only: read it with the jaxattn that wrote it "
        f"({meta.get('jaxattn_version', 'unknown')})"
    )


def finished_parts(kv: KeyValue) -> list[str]:
    """The keys of the store's committed manifest parts: one per finished shard."""
    return [k for k in kv.list(f"{layout.MANIFEST_DIR}/") if k.count("/") == 2]


def create_or_check(kv: KeyValue, meta: dict) -> bool:
    """Create the store's group nodes, or check an existing store against `meta`.

    Safe when several processes call it at once: each writes the same bytes,
    atomically, so no barrier is needed.

    Returns:
      True if the store already existed (a resumed job).

    Raises:
      StoreMismatch: the existing store was written by a different command.
      CaptureFileError: something else, or a damaged store, is there.
    """
    existing = read(kv)
    if existing is not None:
        diff = differences(existing, meta)
        if diff:
            advice = (
                "It holds no finished shard yet: delete it and rerun (a dump of one "
                "process starts such a store over itself)"
                if not finished_parts(kv)
                else "Rerun the original command to finish it, or choose another --out "
                "(or --overwrite to delete the store and start it afresh)"
            )
            raise StoreMismatch(
                f"the store at {kv.location} was written by a different command: "
                + "; ".join(diff)
                + f". {advice}"
            )
        return True
    for group in (*meta["spec"]["what"], layout.MANIFEST_DIR):
        kv.write_json(f"{group}/zarr.json", layout.group_metadata())
    kv.write_json("zarr.json", layout.group_metadata({"jaxattn": meta}))
    return False
