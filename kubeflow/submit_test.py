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
    self.runs = []  # V2beta1Run JSON, newest first

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
    predicate = json.loads(query.get("filter", "{}")).get("predicates", [{}])[0]
    name_filter = predicate.get("stringValue")
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
    elif route == ("GET", f"{API}/runs"):
      answer = _runs_page(server.runs, predicate, query)
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


def _runs_page(runs, predicate, query):
  """A page of runs as the KFP API server answers GET /runs: a `state IN (...)` filter applied,
  page_size runs from the offset in page_token."""
  if predicate:
    assert (predicate["operation"], predicate["key"]) == ("IN", "state"), predicate
    runs = [run for run in runs if run["state"] in predicate["string_values"]["values"]]
  start, size = int(query.get("page_token") or 0), int(query["page_size"])
  answer = {"runs": runs[start:start + size], "total_size": len(runs)}
  if start + size < len(runs):
    answer["next_page_token"] = str(start + size)
  return answer


def _run(run_id, state, pipeline_root=None, pipeline_id="p-1"):
  run = {"run_id": run_id, "display_name": f"name-of-{run_id}", "experiment_id": "e-3",
         "state": state, "created_at": "2026-11-20T21:05:00Z",
         "runtime_config": {"pipeline_root": pipeline_root} if pipeline_root else {}}
  if pipeline_id:
    run["pipeline_version_reference"] = {"pipeline_id": pipeline_id, "pipeline_version_id": "v-1"}
  return run


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
      ("GET", f"{API}/healthz"), ("GET", f"{API}/pipelines"), ("GET", f"{API}/runs"),
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
  # What the check reads.
  assert run["runtime_config"]["pipeline_root"] == config.runner.pipeline_root
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
  root = recurring["runtime_config"]["pipeline_root"]
  assert root == "s3://bucket/wrn/pipeline_root/wrn-tfrecord"
  assert recurring["pipeline_version_reference"] == {"pipeline_id": "p-9",
                                                     "pipeline_version_id": "v-2"}
  parameters = recurring["runtime_config"]["parameters"]
  assert parameters["data_root"] == "s3://data/images-2026-11"
  assert json.loads(parameters["trainer_config"])["trainer"]["train_epochs"] == 200


@pytest.mark.parametrize("args, message", [
    (["schedule", "--experiment=e", "--cron=0 3 * * *"], "wants 6 fields"),
    (["schedule", "--experiment=e", "--cron=0 0 25 * * *"],
     "hour field '25': '25' is outside 0-23"),
    (["schedule", "--experiment=e", "--cron=0 0 3 * * *", "--max_concurrency=0"],
     "--max_concurrency '0': must be an integer >= 1"),
    (["run"], "--experiment is required"),
    (["run", "--experiment=e", "--augmix=false"],
     "--augmix is fixed when the pipeline is compiled"),
    (["run", "--experiment=e", "--dataset=cifar10"], "--dataset is fixed"),
    (["run", "--experiment=e", "--distribution_strategy=mirrored"],
     "--distribution_strategy is fixed"),
    (["run", "--experiment=e", "--seed=7"], "--seed is fixed"),
    (["run", "--experiment=e", "--train_epochs=-1"], "train_epochs=-1: must be > 0"),
    (["run", "--experiment=e", "--no_such_flag=1"], "Unknown flag --no_such_flag"),
    (["run", "--experiment=e", "--data_root=s3://data/x"], "--data_root applies to pipelines"),
    (["run", "--experiment=e", "--allow_concurrent_run=maybe"],
     "Invalid value for --allow_concurrent_run: 'maybe' is not a valid bool"),
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


# One run at a time per pipeline root.

def _run_flags(package, kfp_server, *extra):
  return ["run", f"--package={package.spec_path}", "--experiment=wrn",
          f"--endpoint={kfp_server.url}", *extra]


def test_a_run_is_refused_while_a_run_on_its_pipeline_root_is_active_naming_that_run(
    compiled, kfp_server, capsys):
  config, package = compiled["vertex"]
  kfp_server.pipelines["wrn-image-classifier"] = "p-1"
  # Runs that ended, 150 active ones on other roots, and ours on the second page of 100.
  kfp_server.runs = [_run(f"old-{i}", "SUCCEEDED", config.runner.pipeline_root) for i in range(20)]
  kfp_server.runs += [_run(f"r-{i}", "RUNNING", f"gs://other/{i}") for i in range(150)]
  kfp_server.runs.insert(120, _run("r-active", "RUNNING", config.runner.pipeline_root))
  assert cli.main(_run_flags(package, kfp_server)) == 1
  error = capsys.readouterr().err
  assert (f"error: {config.runner.pipeline_root} is in use by run r-active ('name-of-r-active', "
          "RUNNING, created 2026-11-20 21:05:00+00:00, experiment e-3).") in error
  assert "terminate_run" in error and "--allow_concurrent_run=true" in error
  assert kfp_server.calls() == [("GET", f"{API}/healthz"), ("GET", f"{API}/pipelines")] + [
      ("GET", f"{API}/runs")] * 2, "nothing uploaded, nothing started"
  first_page = kfp_server.requests[2]["query"]
  assert json.loads(first_page["filter"])["predicates"][0]["string_values"]["values"] == [
      "PENDING", "RUNNING", "PAUSED", "CANCELING"]
  assert first_page["sort_by"] == "created_at desc"


def test_a_run_started_elsewhere_of_the_same_pipeline_blocks_too_until_overridden(
    compiled, kfp_server, capsys):
  """A run started in the UI records no pipeline root: it runs on its version's compiled root,
  which for a pipeline of this name is this one."""
  _, package = compiled["vertex"]
  kfp_server.pipelines["wrn-image-classifier"] = "p-1"
  kfp_server.runs = [_run("r-ui", "PENDING", pipeline_root=None)]
  assert cli.main(_run_flags(package, kfp_server)) == 1
  assert "in use by run r-ui ('name-of-r-ui', PENDING" in capsys.readouterr().err
  kfp_server.requests.clear()
  assert cli.main(_run_flags(package, kfp_server, "--allow_concurrent_run=true")) == 0
  assert ("GET", f"{API}/runs") not in kfp_server.calls()
  assert kfp_server.calls()[-1] == ("POST", f"{API}/runs")


def test_runs_that_ended_or_run_on_another_pipeline_root_do_not_block(compiled, kfp_server):
  config, package = compiled["vertex"]
  kfp_server.pipelines["wrn-image-classifier"] = "p-1"
  kfp_server.runs = [
      _run("r-other-root", "RUNNING", "gs://bucket/elsewhere/pipeline_root/wrn-image-classifier"),
      _run("r-other-pipeline", "RUNNING", pipeline_root=None, pipeline_id="p-2"),
      _run("r-failed", "FAILED", config.runner.pipeline_root),
      _run("r-canceled", "CANCELED", pipeline_root=None)]
  assert cli.main(_run_flags(package, kfp_server)) == 0
  assert kfp_server.calls()[-1] == ("POST", f"{API}/runs")


def test_a_schedule_over_dated_folders_passes_the_scheduled_day_as_its_span(kfp_server,
                                                                           monkeypatch,
                                                                           tmp_path, capsys):
  """The documented schedule: each recurring run reads its scheduled day's image folder."""
  from kubeflow import compiler
  from kubeflow.cluster_config import from_flags
  config = from_flags(["--image=gcr.io/proj/wrn-pipeline:7", "--output_dir=s3://bucket/wrn",
                       "--dataset=image_dir", "--train_spans=2", "--pipeline_name=wrn-photos",
                       "--image_dir=s3://bucket/images/{YYYY}-{MM}-{DD}"])
  package = compiler.compile_pipeline(config, str(tmp_path))
  kfp_server.pipelines["wrn-photos"] = "p-9"
  kfp_server.experiments["nightly"] = "e-9"
  monkeypatch.setenv("KFP_ENDPOINT", kfp_server.url)
  assert cli.main(["schedule", f"--package={package.spec_path}", "--experiment=nightly",
                   "--cron=0 0 3 * * *", "--span=[[ScheduledTime.2006-01-02]]"]) == 0
  recurring = kfp_server.request("POST", f"{API}/recurringruns")["body"]
  assert recurring["runtime_config"]["parameters"]["span"] == "[[ScheduledTime.2006-01-02]]"
  # A one-off run gets no expansion: the macro is refused before any call.
  calls = len(kfp_server.calls())
  assert cli.main(["run", f"--package={package.spec_path}", "--experiment=e",
                   "--span=[[ScheduledTime.2006-01-02]]"]) == 2
  assert "expanded only in a recurring run's parameters" in capsys.readouterr().err
  assert len(kfp_server.calls()) == calls
