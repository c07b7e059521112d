"""A fake Hugging Face Hub on 127.0.0.1 for push tests: the endpoints huggingface_hub 2.x calls for
``create_repo`` + ``upload_folder`` over the LFS protocol (Xet disabled), kept in memory.

Routes (all under the server's ``endpoint``):

===============  ======  ========================================================
create           POST    /api/repos/create
repo-info        GET     /api/models/{ns}/{name}          (create_repo after a 401/403)
validate-yaml    POST    /api/validate-yaml               (when README.md is uploaded)
preupload        POST    /api/models/{ns}/{name}/preupload/{revision}
lfs-batch        POST    /{ns}/{name}.git/info/lfs/objects/batch
lfs-upload       PUT     /_fake-lfs/upload/{sha256}       (the ``upload`` href it hands out)
lfs-verify       POST    /_fake-lfs/verify                (the ``verify`` href it hands out)
commit           POST    /api/models/{ns}/{name}/commit/{revision}   (NDJSON)
===============  ======  ========================================================

Anything else answers 404 and is listed in ``unexpected``. Every request is recorded in
``requests`` (route, method, path, Authorization header, status).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_REPO = r"(?P<repo>[^/]+/[^/]+)"
_ROUTES = [
    ("create", "POST", re.compile(r"^/api/repos/create$")),
    ("repo-info", "GET", re.compile(rf"^/api/models/{_REPO}$")),
    ("validate-yaml", "POST", re.compile(r"^/api/validate-yaml$")),
    ("preupload", "POST", re.compile(rf"^/api/models/{_REPO}/preupload/(?P<rev>[^/]+)$")),
    ("lfs-batch", "POST", re.compile(rf"^/{_REPO}\.git/info/lfs/objects/batch$")),
    ("lfs-upload", "PUT", re.compile(r"^/_fake-lfs/upload/(?P<oid>[0-9a-f]{64})$")),
    ("lfs-verify", "POST", re.compile(r"^/_fake-lfs/verify$")),
    ("commit", "POST", re.compile(rf"^/api/models/{_REPO}/commit/(?P<rev>[^/]+)$")),
]
_AUTHENTICATED = {"create", "repo-info", "preupload", "lfs-batch", "lfs-verify", "commit"}
_MAX_BODY = 64 * 2**20


@dataclass
class Seen:
    route: str | None
    method: str
    path: str
    authorization: str | None
    status: int = 0


@dataclass
class Repo:
    private: bool
    branches: dict[str, dict[str, bytes]] = field(default_factory=lambda: {"main": {}})
    commits: list[dict[str, Any]] = field(default_factory=list)  # {"revision", "summary", "lfs": [...]}
    pulls: list[str] = field(default_factory=list)  # refs/pr/N


class _HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class FakeHub:
    """The Hub, in memory. ``token``: the one token it accepts (None: accept any request).

    ``lfs_patterns`` / ``lfs_threshold`` decide which files preupload sends to LFS, as a repo's
    ``.gitattributes`` and the Hub's size rule do.
    """

    def __init__(self, *, token: str | None = None, lfs_patterns: tuple[str, ...] = ("*.safetensors",),
                 lfs_threshold: int = 10 * 2**20):
        self.token = token
        self.lfs_patterns = lfs_patterns
        self.lfs_threshold = lfs_threshold
        self.repos: dict[str, Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[Seen] = []
        self.unexpected: list[Seen] = []
        self._failures: dict[str, tuple[int, str, dict[str, str], bool]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-hub", daemon=True)
        self._thread.start()
        return self.endpoint

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ test controls

    def fail(self, status: int, *, on: str = "*", message: str = "injected failure", code: str | None = None,
             echo_authorization: bool = False) -> None:
        """Answer ``status`` on route ``on`` (``"*"``: every route) with a Hub-style error body.

        ``echo_authorization`` puts the request's Authorization header in the message, as a careless
        proxy might: the client must not repeat it.
        """
        headers = {"X-Error-Code": code} if code else {}
        self._failures[on] = (status, message, headers, echo_authorization)

    def routes(self) -> list[str | None]:
        return [s.route for s in self.requests]

    # ------------------------------------------------------------------ request handling

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(raw_path)
        route, match = None, None
        for name, verb, pattern in _ROUTES:
            if verb == method and (match := pattern.match(url.path)):
                route = name
                break
        seen = Seen(route, method, url.path, headers.get("Authorization"))
        with self._lock:
            self.requests.append(seen)
            if route is None:
                self.unexpected.append(seen)
        try:
            if route is None:
                raise _HubError(404, f"no route for {method} {url.path}")
            failure = self._failures.get(route) or self._failures.get("*")
            if failure:
                status, message, extra, echo = failure
                if echo:
                    message = f"{message}; got Authorization: {seen.authorization}"
                seen.status = status
                return status, {"X-Error-Message": message, **extra}, json.dumps({"error": message}).encode()
            if route in _AUTHENTICATED and self.token is not None and seen.authorization != f"Bearer {self.token}":
                raise _HubError(401, "Invalid credentials in Authorization header")
            params = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with self._lock:
                status, out = getattr(self, "_" + route.replace("-", "_"))(match.groupdict(), params, body)
        except _HubError as e:
            seen.status = e.status
            extra = {"X-Error-Message": e.message, **({"X-Error-Code": e.code} if e.code else {})}
            return e.status, extra, json.dumps({"error": e.message}).encode()
        seen.status = status
        return status, {}, json.dumps(out).encode()

    def _repo(self, repo_id: str) -> Repo:
        if repo_id not in self.repos:
            raise _HubError(404, "Repository not found", "RepoNotFound")
        return self.repos[repo_id]

    def _branch(self, repo: Repo, rev: str) -> dict[str, bytes]:
        if rev not in repo.branches:
            raise _HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return repo.branches[rev]

    def _create(self, _, __, body: bytes):
        payload = json.loads(body)
        if not payload.get("organization") or not payload.get("name"):
            raise _HubError(400, "the fake Hub needs namespace/name repo ids")
        if payload.get("type", "model") != "model":
            raise _HubError(400, f"the fake Hub only hosts models, got {payload.get('type')}")
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = f"{self.endpoint}/{repo_id}"
        if repo_id in self.repos:
            return 409, {"error": "You already created this model repo", "url": url}
        # the Hub's default for a user namespace is public
        self.repos[repo_id] = Repo(private=payload.get("visibility", "public") == "private")
        return 200, {"url": url, "name": repo_id, "id": hashlib.sha1(repo_id.encode()).hexdigest()[:24]}

    def _repo_info(self, groups, _, __):
        repo = self._repo(groups["repo"])
        return 200, {"id": groups["repo"], "modelId": groups["repo"], "private": repo.private,
                     "sha": _commit_oid(repo), "siblings": [{"rfilename": p} for p in repo.branches["main"]]}

    def _validate_yaml(self, _, __, body: bytes):
        payload = json.loads(body)
        if not isinstance(payload.get("content"), str):
            raise _HubError(400, "content must be a string")
        return 200, {"errors": [], "warnings": []}

    def _is_lfs(self, path: str, size: int) -> bool:
        name = path.rsplit("/", 1)[-1]
        return size >= self.lfs_threshold or any(fnmatch.fnmatch(name, p) for p in self.lfs_patterns)

    def _preupload(self, groups, params, body: bytes):
        repo = self._repo(groups["repo"])
        if params.get("create_pr") != "1":
            self._branch(repo, unquote(groups["rev"]))
        files = json.loads(body)["files"]
        return 200, {"files": [
            {"path": f["path"], "uploadMode": "lfs" if self._is_lfs(f["path"], f["size"]) else "regular",
             "shouldIgnore": False, "oid": None}
            for f in files]}

    def _lfs_batch(self, groups, _, body: bytes):
        self._repo(groups["repo"])
        payload = json.loads(body)
        if payload.get("operation") != "upload" or payload.get("hash_algo", "sha256") != "sha256":
            raise _HubError(400, "only sha256 uploads are supported")
        objects = []
        for obj in payload["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.lfs:  # a known object needs no upload, as on the Hub
                entry["actions"] = {
                    "upload": {"href": f"{self.endpoint}/_fake-lfs/upload/{obj['oid']}"},
                    "verify": {"href": f"{self.endpoint}/_fake-lfs/verify"},
                }
            objects.append(entry)
        return 200, {"transfer": "basic", "objects": objects}

    def _lfs_upload(self, groups, _, body: bytes):
        if hashlib.sha256(body).hexdigest() != groups["oid"]:
            raise _HubError(400, "uploaded content does not match its sha256")
        self.lfs[groups["oid"]] = body
        return 200, {}

    def _lfs_verify(self, _, __, body: bytes):
        payload = json.loads(body)
        stored = self.lfs.get(payload.get("oid"))
        if stored is None or len(stored) != payload.get("size"):
            raise _HubError(422, f"object {payload.get('oid')} is missing or has the wrong size")
        return 200, {}

    def _commit(self, groups, params, body: bytes):
        repo = self._repo(groups["repo"])
        rev = unquote(groups["rev"])
        base = self._branch(repo, rev)
        header, changes, lfs_paths = None, {}, []
        for line in body.splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
            elif key == "file":
                if value.get("encoding") != "base64":
                    raise _HubError(400, "file content must be base64")
                changes[value["path"]] = base64.b64decode(value["content"])
            elif key == "lfsFile":
                if value.get("algo") != "sha256" or value["oid"] not in self.lfs:
                    raise _HubError(400, f"LFS object {value['oid']} for {value['path']} was never uploaded")
                data = self.lfs[value["oid"]]
                if value.get("size") is not None and value["size"] != len(data):
                    raise _HubError(400, f"{value['path']}: size {value['size']} != stored {len(data)}")
                changes[value["path"]] = data
                lfs_paths.append(value["path"])
            elif key in ("deletedFile", "deletedFolder"):
                changes[value["path"]] = None
            else:
                raise _HubError(400, f"unknown commit operation {key}")
        if not header or not header.get("summary"):
            raise _HubError(400, "a commit needs a header with a summary")
        files = dict(base)
        for path, data in changes.items():
            if data is None:
                files = {p: d for p, d in files.items() if p != path and not p.startswith(path.rstrip("/") + "/")}
            else:
                files[path] = data
        target = rev
        if params.get("create_pr") == "1":
            target = f"refs/pr/{len(repo.pulls) + 1}"
            repo.pulls.append(target)
        repo.branches[target] = files
        repo.commits.append({"revision": target, "summary": header["summary"],
                             "description": header.get("description", ""), "lfs": lfs_paths})
        oid = _commit_oid(repo)
        out = {"success": True, "commitOid": oid, "commitUrl": f"{self.endpoint}/{groups['repo']}/commit/{oid}",
               "hookOutput": ""}
        if target != rev:
            out["pullRequestUrl"] = f"{self.endpoint}/{groups['repo']}/discussions/{len(repo.pulls)}"
        return 200, out


def _commit_oid(repo: Repo) -> str:
    return hashlib.sha1(json.dumps(repo.commits, sort_keys=True).encode()).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"
    timeout = 5  # an idle keep-alive connection is dropped, so no handler thread waits forever

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > _MAX_BODY:
                    raise _HubError(413, "body too large for the fake Hub")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            raise _HubError(413, "body too large for the fake Hub")
        return self.rfile.read(length)

    def _serve(self) -> None:
        try:
            body = self._body()
        except _HubError as e:
            status, headers, out = e.status, {"Connection": "close"}, json.dumps({"error": e.message}).encode()
            self.close_connection = True
        else:
            status, headers, out = self.hub.handle(self.command, self.path, self.headers, body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # requests are recorded, not printed
        pass
