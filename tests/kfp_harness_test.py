"""The compiled kfp spec, executed as an open-source KFP v2 backend would (test_support/kfp_harness.py),
on s3:// of a local S3 server with a model in production, over the digits as two dated spans of
an image folder on s3:// (--image_dir=s3://.../{YYYY}-{MM}-{DD}): the ExampleGen's driver
resolves the newest day and records it on the Examples; the drift check reads the baseline kept
with the model in production; the Evaluator compares a degraded candidate with that model and
refuses it; nothing is pushed (the blessed and pushed candidate: tests/kfp_local_test.py, on the
same spec). The spec has two Trainer nodes: its Trainer step
launches a Kubeflow Trainer TrainJob, whose nodes run as local processes
(test_support/trainjob_nodes.py). Its Beam steps go to a Beam
worker pool (test_support/beam_servers.py) whose environment has the S3 credentials only: the
endpoint and the region reach the workers in the pipeline's Beam options."""
import json
import os
import re

import pytest
import yaml
from tfx.components.example_gen import utils as example_gen_utils

from kubeflow import submit
from storage import object_storage
from test_support import kfp_harness
from test_support.beam_servers import PortableBeam
from test_support.tiny_config import SMALL_MODEL
from test_support.trainjob_nodes import LocalTrainJobs

# Two nodes of half the per-replica batch: the global batch (and schedule) of one 64-batch pod.
TWO_NODES = ["--replica_count=2", "--distribution_strategy=multi_worker_mirrored",
             "--per_core_batch_size=32"]
PIPELINE_NAME = "wrn-kfp-harness-test"  # Its own serving directory on the session's S3 server.
OLDER, NEWEST = "2026-11-30", "2026-12-01"  # The image folder's days.
UPSTREAM_OF_TRAINER = ("ImageDatasetExampleGen", "StatisticsGen", "ClassSchemaGen",
                       "ExampleValidator", "ValidationGate", "Transform")


def _trainer_config(spec, *trainer_flags):
  """The `trainer_config` runtime parameter as `python -m kubeflow run --FLAG=...` sets it."""
  return submit.run_parameters(spec, list(trainer_flags), None)


def _executor_input_artifact(task, name):
  (artifact,) = task.executor_input["inputs"]["artifacts"][name]["artifacts"]
  return artifact


def test_the_harness_refuses_what_the_backend_refuses(tmp_path):
  """argocompiler/dag.go: a resolver (or customJob) executor fails the pipeline up front."""
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {
              "Trainer_executor": {"container": {"image": "i", "command": ["python"]}},
              "latest_blessed_model_resolver_executor": {"resolver": {}}}},
          "components": {}, "root": {"dag": {"tasks": {}}}}
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(spec))
  with pytest.raises(kfp_harness.RefusedPipeline,
                     match="latest_blessed_model_resolver_executor: resolver executors not "
                           "implemented"):
    kfp_harness.Harness(str(path), str(tmp_path / "work"))


def test_the_harness_hands_the_executor_input_over_as_the_launcher_marshals_it():
  """launcher_v2.go: {{$}} is protojson.Marshal's output: no empty maps, integral numbers
  without a fraction (what kfp.local's executor_input_to_dict writes too)."""
  executor_input = {
      "inputs": {"parameterValues": {"output_data_format": 6.0, "ratio": 0.5}, "artifacts": {}},
      "outputs": {"artifacts": {}, "parameters": {}, "outputFile": "/tmp/out.json"}}
  text = kfp_harness.placeholders(executor_input)["{{$}}"]
  assert json.loads(text) == {"inputs": {"parameterValues": {"output_data_format": 6,
                                                             "ratio": 0.5}},
                              "outputs": {"outputFile": "/tmp/out.json"}}
  assert '"output_data_format":6,' in text


def test_the_harness_names_each_output_artifact_after_its_key(tmp_path):
  """driver.go provisionOutputs (KFP 2.15 on), as kfp.local does."""
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {}}, "components": {}, "root": {"dag": {"tasks": {}}}}
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(spec))
  harness = kfp_harness.Harness(str(path), str(tmp_path / "work"), publish_logs=False)
  component = {"outputDefinitions": {"artifacts": {"model": {
      "artifactType": {"instanceSchema": "title: tfx.Model\ntype: object\n"}}}}}
  outputs = harness._provision_outputs("s3://b/root/p/run", "Trainer", component,
                                       str(tmp_path / "task"))
  (model,) = outputs["artifacts"]["model"]["artifacts"]
  assert model["name"] == "model"
  assert model["uri"].startswith("s3://b/root/p/run/Trainer/") and model["uri"].endswith("/model")


SECRET_MAPPING = {"secretAsEnv": [{"secretName": "s3", "keyToEnv": [
    {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
    {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}]}]}
GPU_POD = {"resources": {"cpuLimit": 8.0, "cpuRequest": 8.0, "memoryLimit": 34.359738368,
                         "accelerator": {"type": "nvidia.com/gpu", "count": "2"}},
           "env": [{"name": "AWS_ENDPOINT_URL_S3", "value": "http://minio:9000"}]}


def _one_task_spec(tmp_path, container, platform=None):
  """A spec of one container task that records the environment it was given."""
  record = tmp_path / "environ.json"
  container = {"image": "i", "command": ["python", "-c", "import json, os; json.dump(dict("
                                         f"os.environ), open({str(record)!r}, 'w'))"],
               "args": [],
               **container}
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {"Task_executor": {"container": container}}},
          "components": {"Task": {"executorLabel": "Task_executor"}},
          "root": {"dag": {"tasks": {"Task": {"componentRef": {"name": "Task"},
                                              "taskInfo": {"name": "Task"}}}}}}
  documents = [spec]
  if platform is not None:  # As the kfp compiler writes it: a second YAML document.
    documents.append({"platforms": {"kubernetes": {"deploymentSpec": {"executors": {
        "Task_executor": platform}}}}})
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump_all(documents))
  return str(path), record


def test_a_task_gets_its_credentials_from_the_mapped_secret_and_nothing_from_this_machine(
    tmp_path, monkeypatch):
  """driver/k8s.go extendPodSpecPatch: secretKeyRef env; driver.go initPodSpecPatch: the
  container's env and resources."""
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "of-this-machine")
  monkeypatch.setenv("S3_ENDPOINT", "http://this-machine:9000")
  path, record = _one_task_spec(tmp_path, GPU_POD, SECRET_MAPPING)
  harness = kfp_harness.Harness(path, str(tmp_path / "work"), publish_logs=False,
                                secrets={"s3": {"accesskey": "key-id", "secretkey": "secret"}})
  pod = harness.run().tasks["Task"].pod
  environ = json.loads(record.read_text())
  assert (environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"]) == ("key-id", "secret")
  assert environ["AWS_ENDPOINT_URL_S3"] == "http://minio:9000" and "S3_ENDPOINT" not in environ
  assert pod.limits == {"cpu": "8", "memory": "34.359738368G", "nvidia.com/gpu": "2"}
  assert pod.requests == {"cpu": "8"}
  assert pod.secret_env == {"AWS_ACCESS_KEY_ID": ("s3", "accesskey"),
                            "AWS_SECRET_ACCESS_KEY": ("s3", "secretkey")}
  # Without the mapping, the Secret's values reach no task.
  path, record = _one_task_spec(tmp_path, GPU_POD)
  kfp_harness.Harness(path, str(tmp_path / "work2"), publish_logs=False,
                      secrets={"s3": {"accesskey": "key-id"}}).run()
  assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(json.loads(record.read_text()))


@pytest.mark.parametrize("container, platform, secrets, message", [
    ({}, SECRET_MAPPING, {}, "CreateContainerConfigError: secret 's3' not found"),
    ({}, SECRET_MAPPING, {"s3": {"accesskey": "a"}}, "couldn't find key secretkey in Secret s3"),
    ({}, {"secretAsEnv": [{"keyToEnv": [{"secretKey": "k", "envVar": "V"}]}]}, {},
     "missing either SecretName or SecretNameParameter"),
    ({"resources": {"memoryLimit": 2e6}}, None, {}, "memory '2e+06G': quantities must match"),
    ({"resources": {"accelerator": {"type": "gpu", "count": "1"}}}, None, {},
     "limits[gpu]: must be a standard resource type or fully qualified"),
    ({}, {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "yes"}]}, {},
     "Pod is invalid: spec.tolerations: {'key': 'gpu', 'operator': 'Exists', 'value': 'yes'}"),
    ({}, {"nodeSelector": {"labels": {"gpu node": "yes"}}}, {},
     "Pod is invalid: spec.nodeSelector: gpu node='yes': not a label"),
    ({}, {"nodeSelector": {"labels": {"n" * 64: "yes"}}}, {},
     f"Pod is invalid: spec.nodeSelector: {'n' * 64}='yes': not a label"),
    ({}, {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "v" * 64}]}, {},
     "Pod is invalid: spec.tolerations: {'key': 'gpu', 'operator': 'Equal', 'value': 'vvv"),
])
def test_a_task_whose_pod_would_not_be_created_fails(tmp_path, container, platform, secrets,
                                                     message):
  path, record = _one_task_spec(tmp_path, container, platform)
  harness = kfp_harness.Harness(path, str(tmp_path / "work"), publish_logs=False,
                                secrets=secrets)
  with pytest.raises(kfp_harness.TaskFailed, match=re.escape(message)):
    harness.run()
  assert not record.exists()  # The command never ran.


def test_a_platform_section_the_backend_cannot_unmarshal_is_refused(tmp_path):
  path, _ = _one_task_spec(tmp_path, {}, {"secretsAsEnv": []})
  with pytest.raises(kfp_harness.RefusedPipeline, match="failed to unmarshal kubernetes spec"):
    kfp_harness.Harness(path, str(tmp_path / "work"))


@pytest.mark.parametrize("value, text", [(8.0, "8"), (0.5, "0.5"), (34.359738368, "34.359738368"),
                                         (999999.0, "999999"), (2e6, "2e+06"),
                                         (1234567.0, "1.234567e+06"), (1e-5, "1e-05")])
def test_numbers_are_printed_as_gos_fmt_prints_them(value, text):
  """getPodResource formats the spec's numbers with %v before resource.ParseQuantity."""
  assert kfp_harness.go_float(value) == text


def _cache_test_spec(tmp_path):
  """Upstream (cached) -> Downstream (cached, takes the runtime parameter `p`); Fresh (not
  cached) -> Compare (cached). Each execution appends its task's name and `p` to a file."""
  record = tmp_path / "executions.txt"
  model = {"artifactType": {"instanceSchema": "title: tfx.Model\ntype: object\n"}}

  def component(name, **definitions):
    return {"executorLabel": f"{name}_executor", **definitions}

  def executor(name):
    line = name + (" {{$.inputs.parameters['p']}}" if name == "Downstream" else "")
    return {"container": {"image": "i", "command": [
        "python", "-c", f"open({str(record)!r}, 'a').write({line!r} + '\\n')"],
        "args": []}}

  def task(name, cached, producer=None, parameter=False):
    inputs = {}
    if producer:
      inputs["artifacts"] = {"model": {"taskOutputArtifact": {"producerTask": producer,
                                                              "outputArtifactKey": "model"}}}
    if parameter:
      inputs["parameters"] = {"p": {"componentInputParameter": "p"}}
    return {"componentRef": {"name": name}, "taskInfo": {"name": name}, "inputs": inputs,
            **({"cachingOptions": {"enableCache": True}} if cached else {})}

  produces = {"outputDefinitions": {"artifacts": {"model": model}}}
  consumes = {"inputDefinitions": {"artifacts": {"model": model}}}
  spec = {"pipelineInfo": {"name": "p"}, "defaultPipelineRoot": "s3://b/root",
          "deploymentSpec": {"executors": {f"{name}_executor": executor(name) for name in
                                           ("Upstream", "Downstream", "Fresh", "Compare")}},
          "components": {"Upstream": component("Upstream", **produces),
                         "Downstream": component("Downstream", inputDefinitions={
                             **consumes["inputDefinitions"],
                             "parameters": {"p": {"parameterType": "STRING"}}}),
                         "Fresh": component("Fresh", **produces),
                         "Compare": component("Compare", **consumes)},
          "root": {"inputDefinitions": {"parameters": {"p": {"parameterType": "STRING"}}},
                   "dag": {"tasks": {"Upstream": task("Upstream", True),
                                     "Downstream": task("Downstream", True, "Upstream", True),
                                     "Fresh": task("Fresh", False),
                                     "Compare": task("Compare", True, "Fresh")}}}}
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(spec))
  return str(path), record


def test_a_cached_task_reuses_its_outputs_until_a_parameter_or_input_artifact_changes(tmp_path):
  """cacheutils/cache.go: the key is the input parameter values and artifact names (MLMD ids);
  driver.go reuseCachedOutputs hands the earlier execution's artifacts on."""
  path, record = _cache_test_spec(tmp_path)
  harness = kfp_harness.Harness(path, str(tmp_path / "work"), publish_logs=False)
  first, second, third = (harness.run({"p": p}) for p in ("a", "b", "a"))
  assert record.read_text().splitlines() == [
      "Fresh", "Upstream", "Compare", "Downstream a",  # Run 1: everything.
      "Fresh", "Compare", "Downstream b",  # Fresh's new artifact; a new value of p.
      "Fresh", "Compare"]
  assert [name for name, task in second.tasks.items() if task.cached] == ["Upstream"]
  assert second.tasks["Upstream"].outputs == first.tasks["Upstream"].outputs
  assert third.tasks["Downstream"].cached and not third.tasks["Compare"].cached
  assert third.tasks["Downstream"].outputs == first.tasks["Downstream"].outputs


@pytest.mark.parametrize("train, ran", [(1, ["Decide", "Gated", "After", "Other"]),
                                        (0, ["Decide", "Other"])])
def test_a_false_trigger_condition_skips_the_task_and_every_task_after_it(tmp_path, train, ran):
  """driver/container.go evaluates the condition over the resolved inputs; argocompiler/dag.go
  runs a task only after its upstream tasks Succeeded, which a skipped one has not."""
  from test_support import condition_specs
  record = str(tmp_path / "ran.txt")
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(condition_specs.gated_spec(record)))
  harness = kfp_harness.Harness(str(path), str(tmp_path / "work"), publish_logs=False)
  run = harness.run({"train": train})
  assert sorted(condition_specs.ran(record)) == sorted(ran)
  skipped = {name: task.skipped for name, task in run.tasks.items() if task.skipped}
  assert skipped == condition_specs.skipped_when(train)
  if not train:
    assert run.tasks["Gated"].outputs == {}  # No outputs provisioned or recorded.


def test_a_condition_that_cannot_be_evaluated_fails_the_run(tmp_path):
  from test_support import condition_specs
  record = str(tmp_path / "ran.txt")
  path = tmp_path / "spec.yaml"
  path.write_text(yaml.safe_dump(condition_specs.gated_spec(
      record, condition="inputs.artifacts['_Decide.decision'].artifacts[0].uri")))
  harness = kfp_harness.Harness(str(path), str(tmp_path / "work"), publish_logs=False)
  with pytest.raises(kfp_harness.TaskFailed, match="task Gated: evaluation error"):
    harness.run()
  assert "Gated" not in condition_specs.ran(record)


def _run_dependent(tasks, parameter):
  """The tasks whose inputs, through any path, take `parameter` or the output of a task that
  is not cached: those a new value of `parameter` runs again (the harness follows KFP's cache)."""
  dependent = set()
  for name in kfp_harness.task_order(tasks):
    task = tasks[name]
    if not task.get("cachingOptions", {}).get("enableCache"):
      dependent.add(name)
    for spec in task.get("inputs", {}).get("parameters", {}).values():
      if spec.get("componentInputParameter") == parameter:
        dependent.add(name)
    for section in ("artifacts", "parameters"):
      for spec in task.get("inputs", {}).get(section, {}).values():
        producer = spec.get("taskOutputArtifact") or spec.get("taskOutputParameter") or {}
        if producer.get("producerTask") in dependent:
          dependent.add(name)
  return dependent


@pytest.mark.e2e
def test_the_compiled_spec_runs_on_s3_compares_with_production_and_refuses_a_degraded_model(
    tmp_path, s3_server, production_version):
  secrets = kfp_harness.s3_secrets(s3_server)
  with PortableBeam(env=_credentials_only(s3_server)) as beam, \
      LocalTrainJobs(str(tmp_path / "trainjobs"), kfp_harness.without_host_credentials(os.environ),
                     secrets=secrets) as cluster:
    pattern = kfp_harness.dated_digits(s3_server, str(tmp_path / "images"), PIPELINE_NAME,
                                       (OLDER, NEWEST))
    config, compiled = kfp_harness.compile_for_s3(
        s3_server, str(tmp_path / "package"),
        SMALL_MODEL + TWO_NODES + beam.beam_flags() + ["--dataset=image_dir",
                                                       f"--image_dir={pattern}"],
        PIPELINE_NAME)
    spec = submit.load_spec(compiled.spec_path)
    # A later run with another Trainer config reads the newest span afresh (ExampleGen over a
    # span pattern is never cached: a new day may have landed), as it reads the span check and
    # the model in production; every step after the span check takes its decision (the input of
    # its trigger condition), a new artifact each run: they run again.
    tasks = spec["root"]["dag"]["tasks"]
    rerun = _run_dependent(tasks, "trainer_config")
    assert rerun >= set(UPSTREAM_OF_TRAINER)
    uncached = {name for name, task in tasks.items()
                if not task.get("cachingOptions", {}).get("enableCache")}
    assert uncached & set(UPSTREAM_OF_TRAINER) == {"ImageDatasetExampleGen"}
    assert {"SpanCheck", "DriftCheck", "Trainer", "ProductionModel", "Evaluator",
            "Pusher"} <= rerun
    harness = kfp_harness.Harness(compiled.spec_path, str(tmp_path / "harness"),
                                  env=cluster.environ(), secrets=secrets)
    production = production_version(config.runner.serving_model_dir, with_baseline=True)
    versions = kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir)
    # A degraded candidate (two training steps, a runtime parameter) of the newest day, compared
    # with the model in production and refused: nothing is pushed.
    run = harness.run(_trainer_config(spec, "--train_steps=2"))
    newest = example_gen_utils.date_to_span_number(*map(int, NEWEST.split("-")))
    _check_the_span_and_the_drift_baseline(run, harness, production, pattern, newest, s3_server)
    _check_the_refused_run(run, config, harness, production, versions, s3_server, cluster, beam)

    # A model in production that records it was trained on the newest day: the next run trains
    # nothing. The ExampleGen and the span check run again (never cached) and decide so; every
    # task after it is skipped, as the backend's driver skips a task whose condition is false.
    trained_on_newest = _push_recording_span(tmp_path, production, s3_server,
                                             config.runner.serving_model_dir, newest)
    again = harness.run(_trainer_config(spec, "--train_steps=2"))
    assert not again.tasks["SpanCheck"].cached and not again.tasks[
        "ImageDatasetExampleGen"].cached
    decision = harness.metadata.artifact(again.tasks["SpanCheck"].outputs["decision"])
    assert decision["custom_properties"]["train"] == {"double_value": 0.0}
    assert decision["custom_properties"]["reason"]["string_value"].startswith(
        f"span {newest} already in production as version "
        f"{os.path.basename(trained_on_newest)}")
    skipped = {name for name, task in again.tasks.items() if task.skipped}
    assert skipped == set(again.tasks) - {"ImageDatasetExampleGen", "SpanCheck"}
    assert again.tasks["Trainer"].outputs == {}


def _check_the_span_and_the_drift_baseline(run, harness, production, pattern, newest,
                                           s3_server):
  """The Examples record the newest day, as the driver resolved it (MLMD: numbers as doubles;
  a custom property named as a property of the type as "custom:<name>", as TFX's entrypoint
  writes it into the metadata); the drift check compared the new data with the baseline kept
  with the model in production."""
  from tfx.types.artifact import CUSTOM_PROPERTIES_PREFIX
  from components import drift, drift_baseline
  examples = harness.metadata.artifact(run.tasks["ImageDatasetExampleGen"].outputs["examples"])
  properties = examples["custom_properties"]
  assert properties[CUSTOM_PROPERTIES_PREFIX + "span"] == {"double_value": float(newest)}
  assert not {"span", "version", CUSTOM_PROPERTIES_PREFIX + "version"} & set(properties)
  (window,) = json.loads(properties["train_window"]["string_value"])
  assert (window["span"], window["folder"]) == (newest, pattern.replace("{YYYY}-{MM}-{DD}",
                                                                        NEWEST))
  report = harness.metadata.artifact(run.tasks["DriftCheck"].outputs["drift_report"])
  figures = report["custom_properties"]
  assert figures["production_version"] == {"string_value": production}
  assert figures["drift_status"]["string_value"] in (drift_baseline.NO_DRIFT, drift_baseline.DRIFT)
  assert figures["blocks_push"] == {"double_value": 0.0}
  compared = json.loads(kfp_harness.read_object(
      s3_server, f"{report['uri']}/{drift_baseline.RESULT_FILE}"))
  kept = json.loads(kfp_harness.read_object(
      s3_server, f"{production}/{drift_baseline.BASELINE_PATH}/{drift_baseline.INFO_FILE}"))
  assert compared["baseline_train_examples"] == kept["train_examples"]
  assert {c["feature"] for c in compared["comparisons"]} >= {drift.LABEL, drift.BBSD}


def _push_recording_span(tmp_path, production, s3_server, serving_dir, span):
  """The model in production pushed again, as the next version (its drift baseline kept), with
  a push record naming `span` (version 0) as its training data; returns the new version's
  URI."""
  from components import pusher, serving_versions
  local_copy = str(tmp_path / "production-copy")
  kfp_harness.download(s3_server, production, local_copy)
  version_dir = pusher.push_version(
      local_copy, str(tmp_path / "recorded"),
      pusher.saved_model_fingerprint(local_copy, exclude=pusher.NOT_OF_THE_MODEL),
      trained_on=serving_versions.trained_on(span, 0))
  uri = f"{serving_dir}/{os.path.basename(version_dir)}"
  kfp_harness.upload(s3_server, version_dir, uri)
  return uri


def _credentials_only(s3_server):
  """A worker pool's environment: the S3 credentials, no endpoint or region."""
  environ = {name: "" for name in (*object_storage.ENDPOINT_VARIABLES,
                                   *object_storage.REGION_VARIABLES)}
  environ.update({name: s3_server.environ()[name] for name in ("AWS_ACCESS_KEY_ID",
                                                                "AWS_SECRET_ACCESS_KEY")})
  return environ


def _check_the_refused_run(run, config, harness, production, versions, s3_server, cluster,
                           beam):
  metadata = harness.metadata
  assert run.run_root.startswith(f"{config.runner.pipeline_root}/{PIPELINE_NAME}/")
  # The baseline is the model in production, as the OSS driver hands an upstream output over.
  production_id = run.tasks["ProductionModel"].outputs["model"]
  baseline = metadata.artifact(production_id)["custom_properties"]
  assert baseline["in_production"] == {"double_value": 1.0}
  assert baseline["production_version"] == {"string_value": production}
  evaluator = run.tasks["Evaluator"]
  given_baseline = _executor_input_artifact(evaluator, "baseline_model")
  assert given_baseline["name"] == str(production_id)
  assert given_baseline["metadata"]["production_version"] == production
  assert given_baseline["type"] == {"instanceSchema": ""}
  blessing = metadata.artifact(evaluator.outputs["blessing"])["custom_properties"]
  # TFX records on the blessing the baseline its change thresholds were checked against.
  assert blessing["baseline_model"] == {"string_value": given_baseline["uri"]}
  assert blessing["baseline_model_id"] == {"string_value": str(production_id)}
  assert blessing["blessed"] == {"double_value": 0.0}
  pushed = metadata.artifact(run.tasks["Pusher"].outputs["pushed_model"])
  assert pushed["custom_properties"]["pushed"] == {"double_value": 0.0}
  assert kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir) == versions
  assert [f"{config.runner.serving_model_dir}/{version}" for version in versions] == [production]
  # The report step's page, typed as the KFP UI renders it, on s3://, says why; its figures
  # in MLMD.
  report = metadata.artifact(run.tasks["RunReport"].outputs["report"])
  assert report["type"] == "system.HTML"
  figures = report["custom_properties"]
  assert figures["display_name"] == {"string_value": "run report"}
  assert figures["blessed"] == {"double_value": 0.0}
  page = kfp_harness.read_object(s3_server, report["uri"]).decode()
  assert "<strong>NOT BLESSED</strong>" in page and "<p>Failed:</p>" in page  # And which bound.
  assert "data:image/png;base64," in page
  assert metadata.artifact(run.tasks["RunReport"].outputs["report_markdown"])["type"] == \
      "system.Markdown"
  # Each pod got the S3 credentials from KFP's Secret (the harness gives no host variable).
  for task in run.tasks.values():
    if task.pod is not None:
      assert task.pod.secret_env == {"AWS_ACCESS_KEY_ID": ("mlpipeline-minio-artifact",
                                                           "accesskey"),
                                     "AWS_SECRET_ACCESS_KEY": ("mlpipeline-minio-artifact",
                                                               "secretkey")}, task.name
      assert task.pod.env["AWS_ENDPOINT_URL_S3"] == s3_server.endpoint_url
  # The Trainer's pod only launches the TrainJob; its nodes get the Trainer's resources.
  assert "memory" not in run.tasks["Trainer"].pod.limits
  # Every artifact lives under the run's root on s3://, as the driver names them.
  for task in run.tasks.values():
    for artifact_id in task.outputs.values():
      assert metadata.artifact(artifact_id)["uri"].startswith(f"{run.run_root}/{task.name}/")

  # Every Beam step ran in the pool's workers, the endpoint and region from the run's options.
  assert beam.steps_not_run_here() == []
  for records in beam.worker_records().values():
    options = records[0]["options"]
    assert options["s3_endpoint_url"] == s3_server.endpoint_url
    assert options["beam_plugins"] == [object_storage.BEAM_PLUGIN]
    assert records[0]["staged"] == ["submission_environment_dependencies.txt"]  # The image's.

  # The Trainer ran as one TrainJob of two nodes, both exiting 0.
  assert list(cluster.runs.values()) == [[0, 0]]
  with open(os.path.join(harness.workdir, run.run_id, "Trainer", "log.txt")) as f:
    assert "Created TrainJob kubeflow-user/tfx-trainer-" in f.read()
  print(json.dumps({"run s": round(run.seconds)}))
