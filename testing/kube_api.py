"""A Kubernetes API server stand-in on 127.0.0.1 for the TrainJob launcher's tests.

It answers the REST calls the `kubernetes` client makes for the launcher
(kubeflow/trainjob_client.py), as the API server does: create (201; 409 AlreadyExists), get
(404 NotFound), watch (`?watch=true`: one JSON event per line from `resourceVersion` on, until
`timeoutSeconds`), delete (with a DELETED event) of namespaced custom objects, and pod lists
filtered by one `label=value` selector. The test plays the controllers: it sets a TrainJob's
status and the pods of its nodes.
"""
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Tuple

import yaml


class KubeApi:
  """The objects, every change as an event, and a server answering the API calls."""

  def __init__(self):
    self.objects: Dict[Tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object.
    self.pods: Dict[str, List[dict]] = {}  # namespace -> pods.
    self.events: List[Tuple[int, str, str, dict]] = []  # (version, plural, type, object).
    self.requests: List[Tuple[str, str]] = []  # (method, path) of every call.
    self.version = 0
    self.changed = threading.Condition()
    self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
    self.server.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
    self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *_):
    self.server.shutdown()
    self.server.server_close()

  def record(self, plural: str, kind: str, obj: dict) -> dict:
    """Stores a change (ADDED, MODIFIED, DELETED) with a new resourceVersion; wakes watchers."""
    with self.changed:
      self.version += 1
      obj = json.loads(json.dumps(obj))
      obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
      key = (plural, obj["metadata"]["namespace"], obj["metadata"]["name"])
      if kind == "DELETED":
        self.objects.pop(key, None)
      else:
        self.objects[key] = obj
      self.events.append((self.version, plural, kind, obj))
      self.changed.notify_all()
      return obj

  def set_status(self, plural: str, namespace: str, name: str, status: dict) -> None:
    """What a controller does: the object's status changes."""
    obj = dict(self.objects[(plural, namespace, name)], status=status)
    self.record(plural, "MODIFIED", obj)


def write_kubeconfig(path: str, server_url: str, namespace: str) -> str:
  """A kubeconfig whose current context is this server (`kubernetes.config` reads it)."""
  with open(path, "w") as f:
    yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": server_url}}],
        "users": [{"name": "local", "user": {"token": "local"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local",
                                                   "namespace": namespace}}]}, f)
  return path


def _status(code: int, reason: str, message: str) -> dict:
  return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
          "reason": reason, "message": message}


def _handler(api: KubeApi):
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # Quiet.
      pass

    def _send(self, code: int, body: dict) -> None:
      data = json.dumps(body).encode()
      self.send_response(code)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def _route(self):
      """(plural, namespace, name or None, query) of /apis/G/V/namespaces/NS/PLURAL[/NAME] and
      /api/v1/namespaces/NS/pods."""
      url = urllib.parse.urlparse(self.path)
      parts = url.path.strip("/").split("/")
      query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
      api.requests.append((self.command, url.path))
      start = 2 if parts[0] == "api" else 3
      if parts[start:start + 1] != ["namespaces"] or len(parts) < start + 3:
        return None
      namespace, plural = parts[start + 1], parts[start + 2]
      name = parts[start + 3] if len(parts) > start + 3 else None
      return plural, namespace, name, query

    def do_POST(self):
      plural, namespace, _, _ = self._route()
      obj = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
      obj["metadata"]["namespace"] = namespace
      if (plural, namespace, obj["metadata"]["name"]) in api.objects:
        return self._send(409, _status(409, "AlreadyExists",
                                       f"{plural} \"{obj['metadata']['name']}\" already exists"))
      self._send(201, api.record(plural, "ADDED", obj))

    def do_GET(self):
      plural, namespace, name, query = self._route()
      if plural == "pods":
        label, _, value = query.get("labelSelector", "=").partition("=")
        items = [pod for pod in api.pods.get(namespace, [])
                 if pod["metadata"].get("labels", {}).get(label) == value]
        return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                "items": items})
      if name is not None:
        obj = api.objects.get((plural, namespace, name))
        if obj is None:
          return self._send(404, _status(404, "NotFound", f"{plural} \"{name}\" not found"))
        return self._send(200, obj)
      if query.get("watch") in ("true", "1"):
        return self._watch(plural, namespace, query)
      items = [obj for (p, ns, _), obj in api.objects.items() if (p, ns) == (plural, namespace)]
      self._send(200, {"items": items, "metadata": {"resourceVersion": str(api.version)}})

    def _watch(self, plural, namespace, query):
      """Streams the events after resourceVersion for the selected name, until the timeout."""
      selected = query.get("fieldSelector", "").partition("metadata.name=")[2] or None
      seen = int(query.get("resourceVersion") or 0)
      self.send_response(200)
      self.send_header("Content-Type", "application/json")
      self.end_headers()  # No length: the body ends when the connection closes (HTTP/1.0).
      timeout = float(query.get("timeoutSeconds", 5))
      with api.changed:
        while True:
          for version, event_plural, kind, obj in api.events:
            if (version > seen and event_plural == plural
                and obj["metadata"]["namespace"] == namespace
                and selected in (None, obj["metadata"]["name"])):
              self.wfile.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
              self.wfile.flush()
            seen = max(seen, version)
          if not api.changed.wait(timeout):
            return

    def do_DELETE(self):
      plural, namespace, name, _ = self._route()
      obj = api.objects.get((plural, namespace, name))
      if obj is None:
        return self._send(404, _status(404, "NotFound", f"{plural} \"{name}\" not found"))
      api.record(plural, "DELETED", obj)
      self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

  return Handler
