"""Resolve one model the way `jaxattn.load` does, in a process of its own, and print the
outcome as JSON: huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE when it
is imported, so each environment needs a fresh process (`conftest.resolve` runs this).

    python driver.py '{"model": "org/name@v1.0"}'
    -> {"path": ..., "revision": ..., "name": ..., "files": [...]}
    -> {"error": "GatedModelError", "bases": [...], "message": "..."}

Options: "revision" (the keyword), "free" (bytes the disk has free: a full disk),
"enospc" (every download fails with ENOSPC: the disk fills up mid-file), "chunk"
(huggingface_hub's download chunk in bytes, 10 MB: smaller, a tiny file is
written in parts, so a download cut off mid-file resumes with a Range request).
"""

from __future__ import annotations

import errno
import json
import shutil
import sys
from pathlib import Path


def main() -> None:
    args = json.loads(sys.argv[1])
    if "free" in args:
        real = shutil.disk_usage
        shutil.disk_usage = lambda p: real(p)._replace(free=args["free"])
    if "chunk" in args:
        from huggingface_hub import constants

        constants.DOWNLOAD_CHUNK_SIZE = args["chunk"]
    if args.get("enospc"):
        from huggingface_hub import file_download

        def full(*_, **__):
            raise OSError(errno.ENOSPC, "No space left on device")

        file_download.http_get = full
    from jaxattn.checkpoints.model_ref import parse_model

    try:
        model = parse_model(args["model"], args.get("revision")).resolve()
    except Exception as e:  # noqa: BLE001 (the outcome is the answer)
        bases = [c.__name__ for c in type(e).__mro__]
        print(json.dumps({"error": type(e).__name__, "bases": bases, "message": str(e)}))
        return
    files = sorted(p.relative_to(model.path).as_posix() for p in Path(model.path).rglob("*"))
    print(
        json.dumps(
            {
                "path": str(model.path),
                "revision": model.revision,
                "name": model.name,
                "files": files,
            }
        )
    )


if __name__ == "__main__":
    main()
