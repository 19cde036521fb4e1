"""The compiled kfp spec run by the KFP SDK's own local orchestrator (`python -m kubeflow
local-run`, kfp.local), twice: run 1 pushes a blessed model to s3:// of a local S3 server;
run 2's Evaluator is handed that pushed model as its baseline and refuses a degraded candidate.
kfp.local keeps artifacts under a local pipeline root (it reads them with local file
operations); the serving directory and the schema are on s3://."""
import json
import os

import pytest
from kfp.local import executor_input_utils

from kubeflow import cli
from kubeflow import compiler
from kubeflow import local_run
from kubeflow import submit
from testing import kfp_harness
from testing.tiny_config import SMALL_MODEL

PIPELINE_NAME = "wrn-kfp-local"  # Its own serving directory, apart from the harness test's.


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
def test_kfp_local_runs_the_compiled_spec_and_hands_the_pushed_model_over_as_baseline(
    tmp_path, s3_server, monkeypatch, recorded):
  runs, built = recorded
  config, compiled = kfp_harness.compile_for_s3(s3_server, str(tmp_path / "package"),
                                                SMALL_MODEL, PIPELINE_NAME)
  for name, value in s3_server.environ().items():  # What each task's process inherits.
    monkeypatch.setenv(name, value)
  local_run_command = ["local-run", f"--package={compiled.spec_path}", "--runner=subprocess",
                       f"--pipeline_root={tmp_path / 'root'}"]

  # Run 1: nothing in production; the candidate passes the absolute bounds and is pushed.
  assert kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir) == []
  assert cli.main(local_run_command) == 0
  (first,) = runs
  assert set(first.tasks) == set(submit.load_spec(compiled.spec_path)["root"]["dag"]["tasks"])
  # Every task got exactly what kfp.local's own executor-input builder made for it.
  for task in first.tasks.values():
    executor_input, component_spec = built[os.path.dirname(
        task.executor_input["outputs"]["outputFile"])]
    assert task.executor_input == executor_input_utils.executor_input_to_dict(
        executor_input, component_spec), task.name
    for artifacts in task.executor_input["outputs"]["artifacts"].values():
      assert artifacts["artifacts"][0]["uri"].startswith(first.run_root + "/")
  versions = kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir)
  assert len(versions) == 1
  first_version = f"{config.runner.serving_model_dir}/{versions[0]}"
  assert kfp_harness.local_output_metadata(first.tasks["Evaluator"], "blessing")["blessed"] == 1
  assert kfp_harness.local_output_metadata(first.tasks["ProductionModel"],
                                           "model")["in_production"] == 0
  # The report step's page: the file at its artifact's URI, with the figures as its metadata.
  report = kfp_harness.local_output_metadata(first.tasks["RunReport"], "report")
  assert report["display_name"] == "run report" and report["blessed"] == 1
  assert report["pushed_version"] == first_version
  (report_artifact,) = (first.tasks["RunReport"].executor_input["outputs"]["artifacts"]
                        ["report"]["artifacts"])
  assert compiler.artifact_title(report_artifact["type"]) == "system.HTML"
  with open(report_artifact["uri"]) as f:
    assert "<strong>BLESSED</strong>" in f.read()

  # Run 2: a degraded candidate (two training steps). kfp.local has no cache: every task runs
  # again; the baseline is the model run 1 pushed, the candidate is refused, nothing is pushed.
  assert cli.main(local_run_command + ["--train_steps=2"]) == 0
  second = runs[1]
  assert second.run_root != first.run_root
  production = kfp_harness.local_output_metadata(second.tasks["ProductionModel"], "model")
  assert production["production_version"] == first_version
  evaluator = second.tasks["Evaluator"]
  (baseline,) = evaluator.executor_input["inputs"]["artifacts"]["baseline_model"]["artifacts"]
  (production_model,) = (second.tasks["ProductionModel"].executor_input["outputs"]["artifacts"]
                         ["model"]["artifacts"])
  assert baseline["uri"] == production_model["uri"]
  assert baseline["metadata"]["production_version"] == first_version
  # As kfp.local hands an upstream output over (an OSS backend: MLMD id, empty instance schema).
  assert baseline["name"] == "model"
  assert baseline["type"] == {"schemaTitle": "system.Artifact", "schemaVersion": "0.0.1"}
  blessing = kfp_harness.local_output_metadata(evaluator, "blessing")
  # TFX records on the blessing the baseline its change thresholds were checked against.
  assert blessing["baseline_model"] == baseline["uri"]
  assert blessing["blessed"] == 0
  assert kfp_harness.local_output_metadata(second.tasks["Pusher"], "pushed_model")["pushed"] == 0
  assert kfp_harness.local_output_metadata(second.tasks["RunReport"], "report")["blessed"] == 0
  assert kfp_harness.pushed_versions(s3_server, config.runner.serving_model_dir) == versions
  print(json.dumps({f"run {i + 1} s": round(run.seconds) for i, run in enumerate(runs)}))
