"""The compiled kfp spec run by the KFP SDK's own local orchestrator (`python -m kubeflow
local-run`, kfp.local) with a model in production on s3:// of a local S3 server, over the digits
as two dated spans of an image folder on s3:// (--image_dir=s3://.../{YYYY}-{MM}-{DD}): the run
asks for the older day (the runtime parameter `span`), which the ExampleGen's driver resolves
and records on the Examples; the drift check reads the baseline kept with the model in
production; the Evaluator is handed that model as its baseline, blesses the better candidate,
and it is pushed as the next version, serving as it was evaluated, its record naming the span it
was trained on. The same day again trains nothing. kfp.local keeps artifacts under a local
pipeline root (it reads them with local file operations); the serving directory, the images and
the schema are on s3://. (A refused candidate, nothing pushed: the same spec under
tests/kfp_harness_test.py.)"""
import json
import os

import pytest
from kfp.local import executor_input_utils

from tfx.components.example_gen import utils as example_gen_utils
from tfx.types.artifact import CUSTOM_PROPERTIES_PREFIX

from components import drift_baseline
from components.drift import BBSD, LABEL
from kubeflow import cli
from kubeflow import compiler
from kubeflow import local_run
from kubeflow import submit
from test_support import image_folders, kfp_harness
from test_support.tiny_config import SMALL_MODEL
from trainer_module.features import PUSH_INFO_PATH

PIPELINE_NAME = "wrn-kfp-local"  # Its own serving directory, apart from the harness test's.
OLDER, NEWEST = "2026-11-30", "2026-12-01"  # The day a run asks for, and the newest day.


@pytest.fixture
def recorded(monkeypatch):
  """Every LocalRun that `local-run` returns, and every executor input kfp.local's own builder
  (executor_input_utils.construct_executor_input) made, by task root."""
  runs, built = [], {}
  run, construct = local_run.run, executor_input_utils.construct_executor_input

  def recording_run(*args, **kwargs):
    runs.append(run(*args, **kwargs))
    return runs[-1]

  def recording_construct(component_spec, arguments, task_root, block_input_artifact):
    built[task_root] = (construct(component_spec, arguments, task_root, block_input_artifact),
                        component_spec)
    return built[task_root][0]

  monkeypatch.setattr(local_run, "run", recording_run)
  monkeypatch.setattr(executor_input_utils, "construct_executor_input", recording_construct)
  return runs, built


@pytest.mark.e2e
def test_kfp_local_runs_the_compiled_spec_and_hands_the_model_in_production_over_as_baseline(
    tmp_path, s3_server, monkeypatch, recorded, production_version):
  runs, built = recorded
  # The baseline knows nothing, and so is calibrated: the bounds on calibration's change are
  # opened; the others (accuracy, NLL) judge the candidate against it.
  pattern = kfp_harness.dated_digits(s3_server, str(tmp_path / "images"), PIPELINE_NAME,
                                     (OLDER, NEWEST))
  config, compiled = kfp_harness.compile_for_s3(
      s3_server, str(tmp_path / "package"),
      SMALL_MODEL + ["--dataset=image_dir", f"--image_dir={pattern}", "--max_ece_increase=1",
                     "--max_corrupted_ece_increase=1", "--max_corrupted_mean_ece_increase=1"],
      PIPELINE_NAME)
  production = production_version(config.runner.serving_model_dir, with_baseline=True)
  for name, value in s3_server.environ().items():  # What each task's process inherits.
    monkeypatch.setenv(name, value)

  local_run_flags = ["local-run", f"--package={compiled.spec_path}", "--runner=subprocess",
                     f"--pipeline_root={tmp_path / 'root'}", f"--span={OLDER}"]
  assert cli.main(local_run_flags) == 0
  (run,) = runs
  # The ExampleGen's driver resolved the day asked for, not the newest, and recorded it: a
  # custom property named as a property of the type (span, version) reaches the metadata as
  # "custom:<name>" (tfx/orchestration/kubeflow/v2/container/kubeflow_v2_entrypoint_utils.py,
  # _get_json_metadata_mapping); no version, as the pattern has no {VERSION}.
  older = example_gen_utils.date_to_span_number(*map(int, OLDER.split("-")))
  examples = kfp_harness.local_output_metadata(run.tasks["ImageDatasetExampleGen"], "examples")
  assert examples[CUSTOM_PROPERTIES_PREFIX + "span"] == older
  assert not {"span", "version", CUSTOM_PROPERTIES_PREFIX + "version"} & set(examples)
  assert examples["input_fingerprint"]
  (window,) = json.loads(examples["train_window"])
  assert (window["span"], window["folder"]) == (older, pattern.replace(
      image_folders.DATE_PATTERN, OLDER))
  assert set(run.tasks) == set(submit.load_spec(compiled.spec_path)["root"]["dag"]["tasks"])
  # Every task got exactly what kfp.local's own executor-input builder made for it.
  for task in run.tasks.values():
    executor_input, component_spec = built[os.path.dirname(
        task.executor_input["outputs"]["outputFile"])]
    assert task.executor_input == executor_input_utils.executor_input_to_dict(
        executor_input, component_spec), task.name
    for artifacts in task.executor_input["outputs"]["artifacts"].values():
      assert artifacts["artifacts"][0]["uri"].startswith(run.run_root + "/")

  # The model in production reaches the Evaluator as its baseline.
  found = kfp_harness.local_output_metadata(run.tasks["ProductionModel"], "model")
  assert found["in_production"] == 1 and found["production_version"] == production
  evaluator = run.tasks["Evaluator"]
  (baseline,) = evaluator.executor_input["inputs"]["artifacts"]["baseline_model"]["artifacts"]
  (production_model,) = (run.tasks["ProductionModel"].executor_input["outputs"]["artifacts"]
                         ["model"]["artifacts"])
  assert baseline["uri"] == production_model["uri"]
  assert baseline["metadata"]["production_version"] == production
  # As kfp.local hands an upstream output over (an OSS backend: MLMD id, empty instance schema).
  assert baseline["name"] == "model"
  assert baseline["type"] == {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}
  blessing = kfp_harness.local_output_metadata(evaluator, "blessing")
  # TFX records on the blessing the baseline its change thresholds were checked against.
  assert blessing["baseline_model"] == baseline["uri"]
  assert blessing["blessed"] == 1

  # The candidate, better than the model in production, is pushed as the next version.
  versions = kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir)
  assert len(versions) == 2 and f"{config.runner.serving_model_dir}/{versions[0]}" == production
  pushed_version = f"{config.runner.serving_model_dir}/{versions[1]}"
  assert kfp_harness.local_output_metadata(run.tasks["Pusher"], "pushed_model")["pushed"] == 1
  # The drift check read the baseline kept with the model in production (the digits it was
  # trained on): the same kind of images, compared; a drift would only warn. The new version
  # keeps the baseline of the data it was trained on, for the next run.
  drift = kfp_harness.local_output_metadata(run.tasks["DriftCheck"], "drift_report")
  assert drift["drift_status"] in (drift_baseline.NO_DRIFT, drift_baseline.DRIFT)
  assert drift["production_version"] == production and drift["blocks_push"] == 0
  (drift_artifact,) = (run.tasks["DriftCheck"].executor_input["outputs"]["artifacts"]
                       ["drift_report"]["artifacts"])
  with open(os.path.join(drift_artifact["uri"], drift_baseline.RESULT_FILE)) as f:
    compared = json.load(f)
  production_baseline = json.loads(kfp_harness.read_object(
      s3_server, f"{production}/{drift_baseline.BASELINE_PATH}/{drift_baseline.INFO_FILE}"))
  assert compared["baseline_train_examples"] == production_baseline["train_examples"]
  assert {c["feature"] for c in compared["comparisons"]} >= {LABEL, BBSD}
  bucket, _, prefix = pushed_version[len("s3://"):].partition("/")
  kept = {key.rsplit("/", 1)[1] for key, _ in s3_server.keys(
      bucket, f"{prefix}/assets.extra/drift_baseline/")}
  assert kept == set(drift_baseline.FILES)
  # The report step's page: the file at its artifact's URI, with the figures as its metadata.
  report = kfp_harness.local_output_metadata(run.tasks["RunReport"], "report")
  assert report["display_name"] == "run report" and report["blessed"] == 1
  assert report["served_check_passed"] == 1
  assert abs(report["served_accuracy"] - report["test_accuracy"]) <= 0.01
  assert report["pushed_version"] == pushed_version
  (report_artifact,) = (run.tasks["RunReport"].executor_input["outputs"]["artifacts"]
                        ["report"]["artifacts"])
  assert compiler.artifact_title(report_artifact["type"]) == "system.HTML"
  with open(report_artifact["uri"]) as f:
    assert "<strong>BLESSED</strong>" in f.read()

  # The pushed version records the data it was trained on: the older day's span. A second run
  # on the same day trains nothing: the span check says so, and local-run skips every task
  # its decision gates, as the backend's driver would; nothing is pushed.
  record = json.loads(kfp_harness.read_object(s3_server, f"{pushed_version}/{PUSH_INFO_PATH}"))
  assert record["trained_on"] == {"span": older, "version": 0, "train_window": str(older),
                                  "input_fingerprint": examples["input_fingerprint"]}
  assert cli.main(local_run_flags) == 0
  again = runs[-1]
  decision = kfp_harness.local_output_metadata(again.tasks["SpanCheck"], "decision")
  assert decision["train"] == 0
  assert decision["reason"].startswith(
      f"span {older} already in production as version {versions[1]}")
  skipped = {name for name, task in again.tasks.items() if task.skipped}
  assert skipped == set(again.tasks) - {"ImageDatasetExampleGen", "SpanCheck"}
  (trained,) = again.tasks["Trainer"].executor_input["outputs"]["artifacts"]["model"][
      "artifacts"]
  assert not os.path.exists(trained["uri"])  # The Trainer did not run.
  assert kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir) == versions
  print(json.dumps({"run s": round(run.seconds), "skipped run s": round(again.seconds)}))
