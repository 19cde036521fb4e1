"""A Kubernetes API server stand-in on 127.0.0.1 for the TrainJob launcher's tests, and the
faults of a flaky one.

It answers the REST calls the `kubernetes` client makes for the launcher
(kubeflow/trainjob_client.py) as the API server does: create (201; 409 AlreadyExists), get
(404 NotFound), delete (with a DELETED event) of namespaced custom objects, pod lists filtered by
one `label=value` selector, and watches. A watch (`?watch=True`, as the client sends it, or
`true`/`1`) is one long-lived streaming response: a JSON event per line (ADDED, MODIFIED,
DELETED, each object carrying its resourceVersion) as the changes happen, from the
`resourceVersion` asked for (without one: the current objects as ADDED first), until
`timeoutSeconds`; from a version older than the history kept (`compact`), an ERROR event with
a 410 Expired Status, as the API server's watch cache answers.

The test plays the controllers (it sets a TrainJob's status and the pods of its nodes) and the
network: `fail(action, *faults)` makes the next requests of an action (create, get, list, watch,
delete, pods) answer with an HTTP status, a reset connection, a lost response (done, then reset),
a hung connection, a slow answer, a watch cut after its first event or one that ends at once;
every request is recorded with its time and query, so a test counts them.

Not kopf's kmock (PyPI, 0.8): its Kubernetes emulator numbers no resourceVersion, replays every
object as ADDED on each watch whatever version is asked, never answers 410 and ignores
timeoutSeconds, so resuming a watch cannot be tested against it; it is also an asyncio server
whose pytest fixture needs pytest-asyncio, where the launcher's client is synchronous.
"""
import json
import os
import socket
import struct
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import yaml

RESET = "reset"  # The connection is reset before any response.
LOST = "lost"  # The request is carried out, then the connection is reset: the answer is lost.
HANG = "hang"  # Nothing is ever answered (until the stand-in stops).
CUT = "cut"  # A watch: its headers and first event, then a reset.
ENDED = "ended"  # A watch: its headers, then its end at once, no event.
SLOW = "slow"  # The request is carried out after SLOW_SECONDS.
SLOW_SECONDS = 1.0
Fault = Union[int, str]  # An HTTP status to answer with (e.g. 500, 429), or one of the above.


class Call(NamedTuple):
  time: float  # time.monotonic() when the request arrived.
  action: str  # create, get, list, watch, delete or pods.
  method: str
  path: str
  query: Dict[str, str]


class KubeApi:
  """The objects, every change as an event, and a server answering the API calls."""

  def __init__(self):
    self.objects: Dict[Tuple[str, str, str], dict] = {}  # (plural, namespace, name) -> object.
    self.pods: Dict[str, List[dict]] = {}  # namespace -> pods.
    self.events: List[Tuple[int, str, str, dict]] = []  # (version, plural, type, object).
    self.requests: List[Tuple[str, str]] = []  # (method, path) of every call.
    self.calls: List[Call] = []
    self.version = 0
    self.oldest_watchable = 0  # A watch from an older resourceVersion gets 410 Expired.
    self.changed = threading.Condition()
    self.stopping = threading.Event()
    self._faults: Dict[str, List[Fault]] = {}
    self._always: Dict[str, Fault] = {}
    self._watch_generation = 0
    self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
    self.server.daemon_threads = True
    self.server.handle_error = lambda request, address: None  # A reset is on purpose.
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
    self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                    kwargs={"poll_interval": 0.05})  # Quick to shut down.

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *_):
    self.stopping.set()
    with self.changed:
      self.changed.notify_all()
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

  def delete(self, plural: str, namespace: str, name: str) -> None:
    """Someone else deletes the object."""
    self.record(plural, "DELETED", self.objects[(plural, namespace, name)])

  def compact(self) -> None:
    """Forgets the history: a watch from any version before now gets 410 Expired."""
    with self.changed:
      self.oldest_watchable = self.version

  def end_watches(self) -> None:
    """Ends every open watch now, as an API server restart does."""
    with self.changed:
      self._watch_generation += 1
      self.changed.notify_all()

  def fail(self, action: str, *faults: Fault) -> None:
    """The next requests of `action` answer with these faults, one each, in order."""
    with self.changed:
      self._faults.setdefault(action, []).extend(faults)

  def fail_always(self, action: str, fault: Optional[Fault]) -> None:
    """Every request of `action` answers with `fault` from now on (None: healed)."""
    with self.changed:
      if fault is None:
        self._always.pop(action, None)
      else:
        self._always[action] = fault

  def count(self, action: str, since: float = 0.0) -> int:
    return sum(1 for call in self.calls if call.action == action and call.time >= since)

  def _next_fault(self, action: str) -> Optional[Fault]:
    with self.changed:
      queued = self._faults.get(action)
      if queued:
        return queued.pop(0)
      return self._always.get(action)


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


_REASONS = {429: "TooManyRequests", 500: "InternalError", 502: "BadGateway",
            503: "ServiceUnavailable", 504: "Timeout"}


def _handler(api: KubeApi):
  class Handler(BaseHTTPRequestHandler):
    # Keep-alive connections, and a watch's events each in a chunk as it happens (with HTTP/1.0
    # a client reads a body of unknown length to its end before it sees any event).
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # Quiet.
      pass

    def finish(self):
      try:
        super().finish()
      except OSError:  # A connection reset on purpose.
        pass

    def _send(self, code: int, body: dict, headers: Optional[Dict[str, str]] = None) -> None:
      data = json.dumps(body).encode()
      self.send_response(code)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      for name, value in (headers or {}).items():
        self.send_header(name, value)
      self.end_headers()
      self.wfile.write(data)

    def _reset(self) -> None:
      """Closes the connection with a TCP reset (closing the socket object would not: the
      handler's reader and writer keep it open)."""
      self.close_connection = True
      self.wfile.flush()
      self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
      os.close(self.connection.detach())

    def _route(self):
      """(action, plural, namespace, name or None, query) of /apis/G/V/namespaces/NS/PLURAL[/NAME]
      and /api/v1/namespaces/NS/pods; the call is recorded."""
      url = urllib.parse.urlparse(self.path)
      parts = url.path.strip("/").split("/")
      query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
      start = 2 if parts[0] == "api" else 3
      namespace, plural = parts[start + 1], parts[start + 2]
      name = parts[start + 3] if len(parts) > start + 3 else None
      if plural == "pods":
        action = "pods"
      elif self.command == "POST":
        action = "create"
      elif self.command == "DELETE":
        action = "delete"
      elif name is not None:
        action = "get"
      else:
        action = "watch" if query.get("watch") in ("True", "true", "1") else "list"
      api.calls.append(Call(time.monotonic(), action, self.command, url.path, query))
      api.requests.append((self.command, url.path))
      return action, plural, namespace, name, query

    def _handle(self) -> None:
      action, plural, namespace, name, query = self._route()
      body = (json.loads(self.rfile.read(int(self.headers["Content-Length"])))
              if self.headers.get("Content-Length") else None)
      fault = api._next_fault(action)  # pylint: disable=protected-access
      if fault == RESET:
        return self._reset()
      if fault == HANG:
        api.stopping.wait()
        return self._reset()
      if fault == SLOW:
        api.stopping.wait(SLOW_SECONDS)
      if isinstance(fault, int):
        headers = {"Retry-After": "1"} if fault == 429 else {}
        return self._send(fault, _status(fault, _REASONS.get(fault, "InternalError"),
                                         f"injected {fault}"), headers)
      if action == "watch":
        return self._watch(plural, namespace, query, cut=fault == CUT, ended=fault == ENDED)
      code, answer = self._answer(action, plural, namespace, name, query, body)
      if fault == LOST:
        return self._reset()
      self._send(code, answer)

    do_GET = do_POST = do_DELETE = _handle

    def _answer(self, action, plural, namespace, name, query, body) -> Tuple[int, dict]:
      key = (plural, namespace, name)
      if action == "create":
        body["metadata"]["namespace"] = namespace
        key = (plural, namespace, body["metadata"]["name"])
        with api.changed:
          if key in api.objects:
            return 409, _status(409, "AlreadyExists", f"{plural} \"{key[2]}\" already exists")
          return 201, api.record(plural, "ADDED", body)
      if action == "pods":
        label, _, value = query.get("labelSelector", "=").partition("=")
        items = [pod for pod in api.pods.get(namespace, [])
                 if pod["metadata"].get("labels", {}).get(label) == value]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
      if action == "list":
        with api.changed:
          items = [obj for (p, ns, _), obj in api.objects.items() if (p, ns) == (plural, namespace)]
          return 200, {"items": items, "metadata": {"resourceVersion": str(api.version)}}
      with api.changed:
        obj = api.objects.get(key)
        if obj is None:
          return 404, _status(404, "NotFound", f"{plural} \"{name}\" not found")
        if action == "delete":
          api.record(plural, "DELETED", obj)
          return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return 200, obj

    def _write_chunk(self, data: bytes) -> None:
      self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
      self.wfile.flush()

    def _write_event(self, kind: str, obj: dict) -> None:
      self._write_chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def _watch(self, plural: str, namespace: str, query: dict, cut: bool, ended: bool) -> None:
      """Streams the changes after resourceVersion for the selected name, as they happen, until
      timeoutSeconds."""
      selected = query.get("fieldSelector", "").partition("metadata.name=")[2] or None
      deadline = 0 if ended else time.monotonic() + float(query.get("timeoutSeconds", 1800))

      def chosen(event_plural, obj):
        return (event_plural == plural and obj["metadata"]["namespace"] == namespace
                and selected in (None, obj["metadata"]["name"]))

      self.send_response(200)
      self.send_header("Content-Type", "application/json")
      self.send_header("Transfer-Encoding", "chunked")
      self.end_headers()
      self.wfile.flush()
      with api.changed:
        generation = api._watch_generation  # pylint: disable=protected-access
        asked = query.get("resourceVersion") or "0"
        if ended:
          pending, seen = [], api.version
        elif asked == "0":  # The current state first, then the changes.
          pending = [("ADDED", obj) for (p, _, _), obj in api.objects.items() if chosen(p, obj)]
          seen = api.version
        elif int(asked) < api.oldest_watchable:
          pending = [("ERROR", _status(410, "Expired", f"too old resource version: {asked} "
                                                      f"({api.oldest_watchable})"))]
          deadline, seen = 0, api.version
        else:
          pending, seen = [], int(asked)
      while True:
        for kind, obj in pending:
          self._write_event(kind, obj)
          if cut:
            return self._reset()
        with api.changed:
          while True:
            if (api.stopping.is_set()
                or generation != api._watch_generation):  # pylint: disable=protected-access
              return self._write_chunk(b"")
            pending = [(kind, obj) for version, p, kind, obj in api.events
                       if version > seen and chosen(p, obj)]
            seen = api.version
            left = deadline - time.monotonic()
            if pending:
              break
            if left <= 0:
              return self._write_chunk(b"")
            api.changed.wait(left)

  return Handler
