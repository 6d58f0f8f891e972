"""In-process fake of the Hugging Face Hub HTTP API, driven by the real `huggingface_hub` client.

Point the client at it with `HfApi(endpoint=server.url, token=...)` (or `HF_ENDPOINT=server.url`).
Only model repos and the classic git-LFS upload path (single-part PUT) are implemented.

Client switches (huggingface_hub 1.33):
- Xet: with `hf_xet` installed the client uploads through Xet whatever the server answers
  (`utils._runtime.is_xet_available()`), and this server has no Xet storage. Set
  `HF_HUB_DISABLE_XET=1` before huggingface_hub is imported, or in a test
  `monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)` (read per call).
  A client that still tries Xet gets a 501 on `.../xet-write-token/...`.
- Retries: the LFS PUT goes through `utils._http.http_backoff` (max_retries=5: 6 attempts, sleeping
  1+2+4+8+8 = 23 s) on network errors and 408/429/5xx; no env var shortens it. So with
  `fail_lfs_uploads >= 6` an upload fails for good after ~23 s (RuntimeError "Error while uploading
  '<file>' to the Hub.", caused by e.g. httpx.RemoteProtocolError); with 0 a re-run goes through.
- Set `HF_HUB_DISABLE_TELEMETRY=1`. Use `token=False` for anonymous calls: `None` makes the
  client fall back to HF_TOKEN or the stored token.

Auth: `tokens` maps token -> "write" | "read". Unknown or missing bearer token -> 401, read token
on a mutating route -> 403. Downloads from public repos need no token, nor does the LFS PUT: its
href plays the part of a presigned S3 URL, and the client sends no Authorization there.
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

USER = "test-user"  # whoami name, and namespace of repos created without an organization

REPO = r"/(?P<repo>[^/]+/[^/]+)"
REV = r"(?P<rev>[^/]+)"  # the client URL-quotes revisions, "refs/pr/1" arrives as refs%2Fpr%2F1
ROUTES = [  # (method, path regex, handler, access: write | read | download | presigned)
    ("GET", r"/api/whoami-v2", "whoami", "read"),
    ("POST", r"/api/repos/create", "create_repo", "write"),
    ("POST", r"/api/validate-yaml", "validate_yaml", "read"),  # upload of a README.md
    ("GET", rf"/api/models{REPO}(?:/revision/{REV})?", "repo_info", "read"),
    ("GET", rf"/api/models{REPO}/tree/{REV}(?:/(?P<path>.+))?", "tree", "read"),
    ("POST", rf"/api/models{REPO}/branch/(?P<branch>[^/]+)", "create_branch", "write"),
    ("POST", rf"/api/models{REPO}/preupload/{REV}", "preupload", "write"),
    ("POST", rf"/api/models{REPO}/commit/{REV}", "commit", "write"),
    ("GET", rf"/api/models{REPO}/xet-write-token/{REV}", "xet", "read"),
    ("POST", rf"{REPO}\.git/info/lfs/objects/batch", "lfs_batch", "write"),
    ("POST", rf"{REPO}\.git/info/lfs/objects/verify", "lfs_verify", "write"),
    ("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", "lfs_upload", "presigned"),
    ("GET", rf"{REPO}/resolve/{REV}/(?P<path>.+)", "resolve", "download"),
]
RAW_BODY = {"lfs_upload", "commit"}  # the other routes get JSON


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, **extra):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


class HubServer:
    def __init__(self, tokens: dict[str, str], lfs_threshold: int = 1_000_000):
        self.tokens = dict(tokens)
        self.lfs_threshold = lfs_threshold  # files this big (and all *.safetensors) go through LFS
        self.fail_lfs_uploads = 0  # the next n LFS PUTs lose their connection mid-body
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self._repos: dict[str, dict] = {}
        self._lfs: dict[str, bytes] = {}  # sha256 hex -> uploaded LFS object
        self._lock = threading.RLock()

    def __enter__(self) -> "HubServer":
        handler = type("Handler", (_Handler,), {"hub": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # Inspection API for tests.
    def repo(self, repo_id: str) -> dict:
        """{"id", "private", "refs": {ref name: commit id}}."""
        with self._lock:
            repo = self._get_repo(repo_id)
            return {"id": repo_id, "private": repo["private"], "refs": dict(repo["refs"])}

    def files(
        self, repo_id: str, revision: str = "main", missing_ok: bool = False
    ) -> dict[str, bytes]:
        with self._lock:
            if missing_ok and repo_id not in self._repos:
                return {}
            return dict(self._resolve(self._get_repo(repo_id), revision)["tree"])

    def lfs_uploads(self) -> int:
        """How many large-file PUTs arrived (complete or not)."""
        return sum(1 for method, _ in self.requests if method == "PUT")

    def seed(self, repo_id: str, files: dict[str, bytes]) -> None:
        """A repo someone else already filled (no request: as if made before the test)."""
        with self._lock:
            repo = {"private": False, "refs": {}, "commits": {}, "log": [], "prs": 0}
            self._repos[repo_id] = repo
            self._add_commit(repo, "main", {"summary": "their upload"}, dict(files), list(files))

    def edit(self, repo_id: str, files: dict[str, bytes]) -> None:
        """Someone's commit on main, e.g. the card edited in the hub's web editor."""
        with self._lock:
            repo = self._get_repo(repo_id)
            tree = {**self._resolve(repo, "main")["tree"], **files}
            self._add_commit(repo, "main", {"summary": "their edit"}, tree, list(files))

    def commits(self, repo_id: str) -> list[dict]:
        """Oldest first, from the empty "initial commit"; `files` lists the paths each touched."""
        keys = ("id", "summary", "description", "revision", "files")
        with self._lock:
            return [{k: c[k] for k in keys} for c in self._get_repo(repo_id)["log"]]

    # State helpers; callers hold the lock.
    def _get_repo(self, repo_id: str) -> dict:
        if repo_id not in self._repos:
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return self._repos[repo_id]

    def _resolve(self, repo: dict, rev: str) -> dict:
        commit_id = repo["refs"].get(rev, rev)  # a ref name or a commit id
        if commit_id not in repo["commits"]:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return repo["commits"][commit_id]

    def _add_commit(self, repo: dict, ref: str, header: dict, tree: dict, touched: list) -> dict:
        seed = f"{repo['refs'].get(ref)}\n{ref}\n{header['summary']}\n{len(repo['log'])}"
        commit = {
            "id": hashlib.sha1(seed.encode()).hexdigest(),
            "summary": header["summary"],
            "description": header.get("description", ""),
            "revision": ref,
            "files": sorted(touched),
            "tree": tree,
        }
        repo["commits"][commit["id"]] = commit
        repo["log"].append(commit)
        repo["refs"][ref] = commit["id"]
        return commit

    # Route handlers: (URL groups + query, body, token) -> JSON value, or (bytes, headers).
    def _on_whoami(self, p, body, token):
        return {"name": USER, "type": "user", "auth": {"accessToken": {"role": self.tokens[token]}}}

    def _on_validate_yaml(self, p, body, token):
        return {"errors": [], "warnings": []}

    def _on_xet(self, p, body, token):
        raise HubError(501, "This test hub has no Xet storage: set HF_HUB_DISABLE_XET=1")

    def _on_create_repo(self, p, body, token):
        if body.get("type", "model") != "model":
            raise HubError(400, "Only model repos are supported")
        name = body["name"]
        if "/" not in name:  # older clients send "org/name", newer ones an "organization" field
            name = f"{body.get('organization') or USER}/{name}"
        if name in self._repos:  # create_repo(exist_ok=True) still reads "url" from the 409 body
            raise HubError(409, "You already created this model repo", url=f"{self.url}/{name}")
        private = body.get("visibility") == "private" or body.get("private") is True
        repo = {"private": private, "refs": {}, "commits": {}, "log": [], "prs": 0}
        self._repos[name] = repo
        self._add_commit(repo, "main", {"summary": "initial commit"}, {}, [])
        return {"url": f"{self.url}/{name}", "name": name}

    def _on_repo_info(self, p, body, token):
        repo = self._get_repo(p["repo"])
        commit = self._resolve(repo, p["rev"] or "main")
        files = [{"rfilename": path} for path in sorted(commit["tree"])]
        return {"id": p["repo"], "sha": commit["id"], "private": repo["private"], "siblings": files}

    def _on_tree(self, p, body, token):
        files = self._resolve(self._get_repo(p["repo"]), p["rev"])["tree"]
        recursive = p.get("recursive", "false").lower() in ("1", "true")
        prefix = p["path"] + "/" if p["path"] else ""
        entries: dict[str, dict] = {}
        for path, data in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            # Folders between the listed one and the file; only the first level unless recursive.
            for depth in range(1, len(parts) if recursive else min(2, len(parts))):
                folder = prefix + "/".join(parts[:depth])
                oid = git_sha1(folder.encode())  # stable placeholder: there are no git trees here
                entries[folder] = {"type": "directory", "path": folder, "oid": oid, "size": 0}
            if recursive or len(parts) == 1:
                oid, size = git_sha1(data), len(data)
                entries[path] = {"type": "file", "path": path, "size": size, "oid": oid}
        if prefix and not entries:
            raise HubError(404, f"{p['path']} does not exist", "EntryNotFound")
        return list(entries.values())

    def _on_create_branch(self, p, body, token):
        repo = self._get_repo(p["repo"])
        if p["branch"] in repo["refs"]:
            raise HubError(409, "Reference already exists")
        repo["refs"][p["branch"]] = self._resolve(repo, body.get("startingPoint") or "main")["id"]
        return {}

    def _on_preupload(self, p, body, token):
        tree = self._resolve(self._get_repo(p["repo"]), p["rev"])["tree"]
        out = []
        for f in body["files"]:
            lfs = f["size"] >= self.lfs_threshold or f["path"].endswith(".safetensors")
            old = tree.get(f["path"])
            # The client skips a file whose local oid (sha256 for LFS, git sha1 otherwise) matches.
            oid = None if old is None else hashlib.sha256(old).hexdigest() if lfs else git_sha1(old)
            mode = "lfs" if lfs else "regular"
            out.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        return {"files": out}

    def _on_lfs_batch(self, p, body, token):
        self._get_repo(p["repo"])
        objects = []
        for obj in body["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self._lfs:  # no actions: the client skips the upload
                # No "header" with "chunk_size": the client then does one single-part PUT.
                entry["actions"] = {
                    "upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{self.url}/{p['repo']}.git/info/lfs/objects/verify"},
                }
            objects.append(entry)
        return {"transfer": "basic", "objects": objects}

    def _on_lfs_verify(self, p, body, token):
        if body["oid"] not in self._lfs or len(self._lfs[body["oid"]]) != body["size"]:
            raise HubError(404, f"LFS object {body['oid']} not found")
        return {}

    def _on_lfs_upload(self, p, body, token):
        if hashlib.sha256(body).hexdigest() != p["oid"]:
            raise HubError(400, f"sha256 of the uploaded content is not {p['oid']}")
        self._lfs[p["oid"]] = body
        return {}

    def _on_commit(self, p, body, token):
        repo = self._get_repo(p["repo"])
        base = self._resolve(repo, p["rev"])
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next(line["value"] for line in lines if line["key"] == "header")
        tree, touched = dict(base["tree"]), []
        for key, op in ((line["key"], line["value"]) for line in lines if line["key"] != "header"):
            path = op["path"]  # build the new tree aside: a bad operation leaves the repo as it was
            if key == "file":
                tree[path] = base64.b64decode(op["content"])
            elif key == "lfsFile":
                if op["oid"] not in self._lfs:
                    raise HubError(400, f"LFS object {op['oid']} for {path} was never uploaded")
                tree[path] = self._lfs[op["oid"]]
            elif key == "deletedFile":
                if tree.pop(path, None) is None:  # the Hub's wording, which the client checks for
                    msg = f"A file with this name doesn't exist: {path}"
                    raise HubError(404, msg, "EntryNotFound")
            elif key == "deletedFolder":
                tree = {k: v for k, v in tree.items() if not k.startswith(path.rstrip("/") + "/")}
            else:
                raise HubError(400, f"Unsupported commit operation {key!r}")
            touched.append(path)
        ref, pr_url = p["rev"], None
        if p.get("create_pr") == "1":  # the changes go to a new refs/pr/N, based on the revision
            repo["prs"] += 1
            ref = f"refs/pr/{repo['prs']}"
            repo["refs"][ref] = base["id"]
            pr_url = f"{self.url}/{p['repo']}/discussions/{repo['prs']}"
        elif ref not in repo["refs"]:
            raise HubError(400, f"Can only commit to a branch, not to {ref}")
        commit = self._add_commit(repo, ref, header, tree, touched)
        commit_url = f"{self.url}/{p['repo']}/commit/{commit['id']}"
        return {"commitUrl": commit_url, "commitOid": commit["id"], "pullRequestUrl": pr_url}

    def _on_resolve(self, p, body, token):
        commit = self._resolve(self._get_repo(p["repo"]), p["rev"])
        if p["path"] not in commit["tree"]:
            raise HubError(404, f"Entry not found: {p['path']}", "EntryNotFound")
        data = commit["tree"][p["path"]]
        # hf_hub_download's HEAD needs the commit and an ETag, besides Content-Length.
        return data, {"X-Repo-Commit": commit["id"], "ETag": f'"{git_sha1(data)}"'}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the Hub
    hub: HubServer

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):  # served as GET; _send leaves out the body
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def _dispatch(self, method: str):
        url = urlsplit(self.path)
        with self.hub._lock:
            self.hub.requests.append((self.command, self.path))
        route = next(
            (
                (name, match, access)
                for route_method, pattern, name, access in ROUTES
                if route_method == method and (match := re.fullmatch(pattern, url.path))
            ),
            None,
        )
        if route and route[0] == "lfs_upload" and self._drop_upload():
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))  # drain: keep-alive
        try:
            if route is None:
                raise HubError(404, f"No route for {self.command} {url.path}")
            name, match, access = route
            params = {k: v and unquote(v) for k, v in match.groupdict().items()}
            params.update((k, v[0]) for k, v in parse_qs(url.query).items())
            with self.hub._lock:
                token = self._check_auth(access, params.get("repo"))
                body = body if name in RAW_BODY or not body else json.loads(body)
                result = getattr(self.hub, f"_on_{name}")(params, body, token)
        except HubError as e:
            # hf_raise_for_status picks the exception class from X-Error-Code (RepoNotFound, ...)
            # and shows X-Error-Message and the body's "error".
            headers = {"X-Error-Message": e.message, **({"X-Error-Code": e.code} if e.code else {})}
            payload = json.dumps({"error": e.message, **e.extra}).encode()
            self._send(e.status, payload, "application/json", headers)
            return
        if isinstance(result, tuple):
            self._send(200, result[0], "application/octet-stream", result[1])
        else:
            self._send(200, json.dumps(result).encode(), "application/json")

    def _check_auth(self, access: str, repo_id: str | None) -> str | None:
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        if access == "presigned":
            return token
        if access == "download" and not self.hub._get_repo(repo_id)["private"]:
            return token
        role = self.hub.tokens.get(token)
        if role is None:  # this exact message keeps the client from reading 401 as RepoNotFound
            raise HubError(401, "Invalid credentials in Authorization header")
        if access == "write" and role != "write":
            raise HubError(403, "You don't have the rights to write here with a read token")
        return token

    def _drop_upload(self) -> bool:
        """Simulate a network failure: read part of the body, close without a response."""
        with self.hub._lock:
            if self.hub.fail_lfs_uploads <= 0:
                return False
            self.hub.fail_lfs_uploads -= 1
        self.rfile.read(min(65536, int(self.headers.get("Content-Length") or 0) // 2))
        self.close_connection = True
        return True

    def _send(self, status: int, payload: bytes, content_type: str, headers: dict | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
