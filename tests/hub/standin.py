"""A loopback stand-in for the Hugging Face Hub: the endpoints huggingface_hub calls to
download a model, served from memory on 127.0.0.1 (port 0), every request counted.

    hub = HubStandIn().start()                  # HF_ENDPOINT=hub.endpoint in a subprocess
    commit = hub.add("org/tiny", files, tags=("v1.0",))
    hub.fault("model.safetensors", "drop-once") # the next download of it is cut mid-file
    hub.stop()

What it answers, as huggingface.co does (huggingface_hub 2.x reads exactly these):

    GET  /api/models/REPO/revision/REV    repo_info: {"id", "sha": the commit, "siblings"}
    GET  /api/models/REPO/tree/REV        the file listing (path, size, oid, lfs)
    HEAD|GET /REPO/resolve/REV/FILE       200 with ETag, X-Repo-Commit, Content-Length;
                                          weights (LFS) 302 to a "CDN" on another host
                                          name (localhost), with X-Linked-Etag/-Size
    HEAD|GET /cdn/SHA256                  the weights, with Range requests (206)

Errors carry the Hub's X-Error-Code: RepoNotFound (401, as to an anonymous
caller), RevisionNotFound (404), EntryNotFound (404), GatedRepo (401 without a
token, 403 with a wrong one). Faults: "drop-once" sends half of a file and closes
the connection (huggingface_hub resumes with a Range request); "short" sends a
file shorter than the size the HEAD announced (its consistency check fails).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import re
import threading
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".onnx", ".msgpack")


@dataclasses.dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = dataclasses.field(default_factory=dict)
    refs: dict[str, str] = dataclasses.field(default_factory=dict)
    token: str | None = None  # gated: only this token opens the files


class HubStandIn:
    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, tuple[str, bytes]] = {}  # sha256 -> (file name, bytes)
        self.requests: list[tuple[str, str, dict]] = []  # (method, path, lower-cased headers)
        self.faults: dict[str, str] = {}  # file name -> "drop-once" | "short"
        self._server = None

    # -- content ----------------------------------------------------------------------

    def add(
        self,
        repo_id: str,
        files: dict[str, bytes],
        *,
        ref: str = "main",
        tags: tuple[str, ...] = (),
        token: str | None = None,
    ) -> str:
        """A commit of `files` in `repo_id`, which `ref` and `tags` then name; its hash."""
        repo = self.repos.setdefault(repo_id, Repo())
        repo.token = token if token is not None else repo.token
        digest = hashlib.sha1(repo_id.encode() + str(len(repo.commits)).encode())
        for name in sorted(files):
            digest.update(name.encode() + b"\0" + files[name])
        commit = digest.hexdigest()
        repo.commits[commit] = dict(files)
        for name in (ref, *tags):
            repo.refs[name] = commit
        for name, data in files.items():
            self.blobs[hashlib.sha256(data).hexdigest()] = (name, data)
        return commit

    def fault(self, file: str, kind: str | None) -> None:
        """Make downloads of `file` fail ("drop-once", "short"), or stop it (None)."""
        if kind is None:
            self.faults.pop(file, None)
        else:
            self.faults[file] = kind

    def fetched(self) -> list[str]:
        """The files whose bytes were asked for (GET of a resolve or CDN URL)."""
        out = []
        for method, path, _ in self.requests:
            if method != "GET":
                continue
            if "/resolve/" in path:
                out.append(path.rsplit("/", 1)[-1])
            elif path.startswith("/cdn/"):
                out.append(self.blobs[path.removeprefix("/cdn/")][0])
        return out

    def asked(self) -> list[str]:
        """Every file named in a request (HEAD or GET, resolve or CDN)."""
        names = [p.rsplit("/", 1)[-1] for _, p, _ in self.requests if "/resolve/" in p]
        cdn = [
            self.blobs[p.removeprefix("/cdn/")][0]
            for _, p, _ in self.requests
            if p.startswith("/cdn/")
        ]
        return names + cdn

    # -- server -----------------------------------------------------------------------

    def start(self) -> HubStandIn:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _etag(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(hub: HubStandIn):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def do_HEAD(self):  # noqa: N802
            self._route(head=True)

        def do_GET(self):  # noqa: N802
            self._route(head=False)

        def _route(self, head: bool):
            path = unquote(urlsplit(self.path).path)
            hub.requests.append(
                (self.command, path, {k.lower(): v for k, v in self.headers.items()})
            )
            if m := re.fullmatch(r"/api/models/(.+)/(revision|tree)/([^/]+)", path):
                return self._api(*m.groups())
            if m := re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path):
                return self._resolve(*m.groups(), head=head)
            if m := re.fullmatch(r"/cdn/([0-9a-f]{64})", path):
                return self._cdn(m.group(1), head=head)
            self._send(404, b"", {"X-Error-Code": "EntryNotFound"})

        def _commit(self, repo_id: str, rev: str):
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send(
                    401,
                    b"",
                    {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                )
                return None, None
            commit = repo.refs.get(rev, rev if rev in repo.commits else None)
            if commit is None:
                self._send(404, b"", {"X-Error-Code": "RevisionNotFound"})
                return None, None
            return repo, commit

        def _api(self, repo_id: str, kind: str, rev: str):
            repo, commit = self._commit(repo_id, rev)
            if repo is None:
                return
            files = repo.commits[commit]
            if kind == "revision":
                body = {
                    "id": repo_id,
                    "sha": commit,
                    "private": False,
                    "gated": "manual" if repo.token else False,
                    "siblings": [{"rfilename": f} for f in sorted(files)],
                }
            else:
                body = [_entry(name, data) for name, data in sorted(files.items())]
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _gated(self, repo: Repo) -> bool:
            if not repo.token:
                return False
            auth = self.headers.get("Authorization")
            if auth == f"Bearer {repo.token}":
                return False
            self._send(
                403 if auth else 401,
                b"",
                {
                    "X-Error-Code": "GatedRepo",
                    "X-Error-Message": "Access to this model is restricted",
                },
            )
            return True

        def _resolve(self, repo_id: str, rev: str, file: str, head: bool):
            repo, commit = self._commit(repo_id, rev)
            if repo is None or self._gated(repo):
                return
            data = repo.commits[commit].get(file)
            if data is None:
                self._send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
                return
            headers = {"X-Repo-Commit": commit, "ETag": f'"{_etag(data)}"'}
            if file.endswith(LFS_SUFFIXES):
                sha = hashlib.sha256(data).hexdigest()
                headers |= {
                    "Location": f"http://localhost:{hub.port}/cdn/{sha}",
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                }
                self._send(302, b"", headers)
                return
            self._send(200, b"" if head else data, headers, length=len(data))

        def _cdn(self, sha: str, head: bool):
            name, data = hub.blobs[sha]
            fault = hub.faults.get(name)
            start = 0
            if m := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "")):
                start = int(m.group(1))
            part = data[start:]
            headers = {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}
            status = 200
            if start:
                status = 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            if head:
                return self._send(status, b"", headers, length=len(part))
            if fault == "drop-once" and not start:
                hub.faults.pop(name)
                self._send(status, part[: len(part) // 2], headers, length=len(part))
                self.close_connection = True
                return
            if fault == "short":
                part = part[: len(part) // 2]
            self._send(status, part, headers)

        def _send(self, status: int, body: bytes, headers: dict, length: int | None = None):
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if body:
                self.wfile.write(body)
            self.wfile.flush()

    return Handler


def _entry(name: str, data: bytes) -> dict:
    entry = {"type": "file", "path": name, "size": len(data), "oid": _etag(data)}
    if name.endswith(LFS_SUFFIXES):
        entry["lfs"] = {
            "oid": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "pointerSize": 134,
        }
    return entry
