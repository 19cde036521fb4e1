"""The client commands against a local HTTP server that answers the KFP v2 REST calls kfp.Client
makes: what is uploaded, created and started, with which parameters; and that bad input sends
nothing."""
import http.server
import json
import socket
import threading
import urllib.parse

import kfp
import pytest

from kubeflow import cli
from trainer_module.config import TrainerConfig

API = "/apis/v2beta1"


class FakeKfpServer(http.server.ThreadingHTTPServer):
  """Records every request; knows pipelines and experiments by name."""

  def __init__(self):
    super().__init__(("127.0.0.1", 0), _Handler)
    self.requests = []
    self.pipelines = {}  # name -> pipeline id
    self.experiments = {}  # name -> experiment id

  @property
  def url(self):
    return f"http://127.0.0.1:{self.server_address[1]}"

  def calls(self):
    return [(r["method"], r["path"]) for r in self.requests]

  def request(self, method, path):
    return next(r for r in self.requests if (r["method"], r["path"]) == (method, path))


class _Handler(http.server.BaseHTTPRequestHandler):

  def log_message(self, *args):
    pass

  def do_GET(self):
    self._answer("GET")

  def do_POST(self):
    self._answer("POST")

  def _answer(self, method):
    url = urllib.parse.urlsplit(self.path)
    query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
    raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
    is_json = raw and self.headers.get("Content-Type") == "application/json"
    body = json.loads(raw) if is_json else raw
    server = self.server
    server.requests.append({"method": method, "path": url.path, "query": query, "body": body,
                            "authorization": self.headers.get("Authorization")})
    name_filter = json.loads(query.get("filter", "{}")).get("predicates", [{}])[0].get(
        "stringValue")
    route = (method, url.path)
    if route == ("GET", f"{API}/healthz"):
      answer = {"multi_user": False}
    elif route == ("GET", f"{API}/pipelines"):
      known = server.pipelines.get(name_filter)
      answer = {"pipelines": [{"pipeline_id": known, "display_name": name_filter}],
                "total_size": 1} if known else {}
    elif route == ("POST", f"{API}/pipelines/upload"):
      server.pipelines[query["name"]] = "p-1"
      answer = {"pipeline_id": "p-1", "display_name": query["name"]}
    elif route == ("GET", f"{API}/pipelines/p-1/versions"):
      answer = {"pipeline_versions": [{"pipeline_id": "p-1", "pipeline_version_id": "v-1"}],
                "total_size": 1}
    elif route == ("POST", f"{API}/pipelines/upload_version"):
      answer = {"pipeline_id": query["pipelineid"], "pipeline_version_id": "v-2",
                "display_name": query["name"]}
    elif route == ("GET", f"{API}/experiments"):
      known = server.experiments.get(name_filter)
      answer = {"experiments": [{"experiment_id": known, "display_name": name_filter}]} \
          if known else {}
    elif route == ("POST", f"{API}/experiments"):
      answer = {"experiment_id": "e-1", "display_name": body["display_name"]}
    elif route == ("POST", f"{API}/runs"):
      answer = {"run_id": "r-1", "experiment_id": body["experiment_id"]}
    elif route == ("POST", f"{API}/recurringruns"):
      answer = {"recurring_run_id": "rr-1", "experiment_id": body["experiment_id"]}
    else:
      self.send_error(404)
      return
    payload = json.dumps(answer).encode()
    self.send_response(200)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(payload)))
    self.end_headers()
    self.wfile.write(payload)


@pytest.fixture
def kfp_server(monkeypatch, tmp_path):
  for name in ("KFP_ENDPOINT", "KFP_TOKEN", "KF_PIPELINES_ENDPOINT",
               "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID", "KF_PIPELINES_APP_OAUTH2_CLIENT_ID"):
    monkeypatch.delenv(name, raising=False)
  # No kfp context (namespace, cookies) of this machine's user.
  monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "context.json"))
  server = FakeKfpServer()
  thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                            daemon=True)
  thread.start()
  yield server
  server.shutdown()
  server.server_close()


def test_run_uploads_the_pipeline_creates_the_experiment_and_starts_a_run(compiled, kfp_server):
  config, package = compiled["vertex"]
  assert cli.main(["run", f"--package={package.spec_path}", "--experiment=wrn",
                   "--run_name=first", "--train_epochs=3", "--base_learning_rate=0.2",
                   f"--endpoint={kfp_server.url}", "--token=secret-token"]) == 0
  assert kfp_server.calls() == [
      ("GET", f"{API}/healthz"), ("GET", f"{API}/pipelines"),
      ("POST", f"{API}/pipelines/upload"), ("GET", f"{API}/pipelines/p-1/versions"),
      ("GET", f"{API}/experiments"), ("POST", f"{API}/experiments"), ("POST", f"{API}/runs")]
  assert {r["authorization"] for r in kfp_server.requests} == {"Bearer secret-token"}
  upload = kfp_server.request("POST", f"{API}/pipelines/upload")
  assert upload["query"]["name"] == "wrn-image-classifier"
  with open(package.spec_path, "rb") as f:
    assert f.read() in upload["body"]  # The spec itself, as a multipart file.
  assert kfp_server.request("POST", f"{API}/experiments")["body"]["display_name"] == "wrn"
  run = kfp_server.request("POST", f"{API}/runs")["body"]
  assert run["experiment_id"] == "e-1" and run["display_name"] == "first"
  assert run["pipeline_version_reference"] == {"pipeline_id": "p-1", "pipeline_version_id": "v-1"}
  custom_config = json.loads(run["runtime_config"]["parameters"]["trainer_config"])
  trainer = TrainerConfig.from_dict(custom_config["trainer"])
  assert trainer == TrainerConfig.from_dict({**config.trainer.to_dict(), "train_epochs": 3,
                                             "base_learning_rate": 0.2})
  assert custom_config["ai_platform_training_args"]["project"] == "proj"


def test_schedule_adds_a_version_and_creates_a_cron_recurring_run(compiled, kfp_server,
                                                                  monkeypatch):
  _, package = compiled["tfrecord"]
  kfp_server.pipelines["wrn-tfrecord"] = "p-9"
  kfp_server.experiments["nightly"] = "e-9"
  monkeypatch.setenv("KFP_ENDPOINT", kfp_server.url)  # Endpoint and token from the environment.
  monkeypatch.setenv("KFP_TOKEN", "env-token")
  assert cli.main(["schedule", f"--package={package.spec_path}", "--experiment=nightly",
                   "--cron=0 0 3 * * *", "--version=release-7", "--namespace=team-a",
                   "--data_root=s3://data/images-2026-11"]) == 0
  assert kfp_server.calls() == [
      ("GET", f"{API}/pipelines"), ("POST", f"{API}/pipelines/upload_version"),
      ("GET", f"{API}/experiments"), ("POST", f"{API}/recurringruns")]
  assert {r["authorization"] for r in kfp_server.requests} == {"Bearer env-token"}
  version = kfp_server.request("POST", f"{API}/pipelines/upload_version")["query"]
  assert (version["pipelineid"], version["name"]) == ("p-9", "release-7")
  assert kfp_server.request("GET", f"{API}/experiments")["query"]["namespace"] == "team-a"
  recurring = kfp_server.request("POST", f"{API}/recurringruns")["body"]
  assert recurring["trigger"] == {"cron_schedule": {"cron": "0 0 3 * * *"}}
  assert recurring["experiment_id"] == "e-9" and recurring["mode"] == "ENABLE"
  assert recurring["no_catchup"] is True and int(recurring["max_concurrency"]) == 1
  assert recurring["pipeline_version_reference"] == {"pipeline_id": "p-9",
                                                     "pipeline_version_id": "v-2"}
  parameters = recurring["runtime_config"]["parameters"]
  assert parameters["data_root"] == "s3://data/images-2026-11"
  assert json.loads(parameters["trainer_config"])["trainer"]["train_epochs"] == 200


@pytest.mark.parametrize("args, message", [
    (["schedule", "--experiment=e", "--cron=0 3 * * *"], "wants 6 fields"),
    (["schedule", "--experiment=e", "--cron=0 0 25 * * *"], "hour field '25'"),
    (["schedule", "--experiment=e", "--cron=0 0 3 * * *", "--max_concurrency=0"],
     "--max_concurrency"),
    (["run"], "--experiment is required"),
    (["run", "--experiment=e", "--augmix=false"], "--augmix is fixed when the pipeline is compiled"),
    (["run", "--experiment=e", "--dataset=cifar10"], "--dataset is fixed"),
    (["run", "--experiment=e", "--distribution_strategy=mirrored"],
     "--distribution_strategy is fixed"),
    (["run", "--experiment=e", "--seed=7"], "--seed is fixed"),
    (["run", "--experiment=e", "--train_epochs=-1"], "train_epochs=-1"),
    (["run", "--experiment=e", "--no_such_flag=1"], "Unknown flag --no_such_flag"),
    (["run", "--experiment=e", "--data_root=s3://data/x"], "--data_root applies to pipelines"),
    (["upload", "--endpoint=127.0.0.1:8080"], "expected an http:// or https:// URL"),
    (["upload", "--depth=10"], "upload takes no pipeline flags"),
])
def test_bad_input_fails_clearly_and_sends_nothing(compiled, kfp_server, capsys, args, message):
  _, package = compiled["vertex"]
  endpoint = [] if any(a.startswith("--endpoint") for a in args) else [
      f"--endpoint={kfp_server.url}"]
  assert cli.main(args + [f"--package={package.spec_path}"] + endpoint) == 2
  assert message in capsys.readouterr().err
  assert kfp_server.requests == []


def test_no_endpoint_and_no_package_are_named(kfp_server, capsys, tmp_path):
  assert cli.main(["upload", f"--package={tmp_path}/missing.yaml"]) == 2
  assert "no such file" in capsys.readouterr().err
  spec = tmp_path / "spec.yaml"
  spec.write_text("pipelineInfo: {name: x}\nroot: {}\n")
  assert cli.main(["upload", f"--package={spec}"]) == 2
  assert "KFP_ENDPOINT" in capsys.readouterr().err
  assert kfp_server.requests == []


def test_an_unreachable_server_is_named(compiled, capsys):
  _, package = compiled["vertex"]
  with socket.socket() as sock:  # A port nothing listens on.
    sock.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
  assert cli.main(["upload", f"--package={package.spec_path}", f"--endpoint={endpoint}",
                   "--namespace=team-a"]) == 1
  assert f"Kubeflow Pipelines at {endpoint}" in capsys.readouterr().err
