"""The console summary of a finished local run: the gate's numbers, what was pushed, where
the model, metrics and report are."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

from components.calibration_metrics import ECE_NAME, NLL_NAME
from components.example_gen import read_skipped_files
from components.pusher import ALREADY_SERVING_KEY
from reporting import run_report, tfma_results
from pipeline.config import PipelineConfig
from pipeline.evaluation import ACCURACY_NAME
from reporting.run_record import RunRecord
from trainer_module.features import PROBABILITIES_KEY


def gate_summary(config: PipelineConfig, evaluation_uri: str) -> List[str]:
  """The gated numbers of the candidate: clean eval accuracy, ECE, NLL and cA."""
  values = tfma_results.load_metrics(evaluation_uri)
  get = lambda slice_, name: tfma_results.metric(values, slice_, PROBABILITIES_KEY, name)  # noqa
  fmt = lambda value: "not found" if value is None else f"{value:.4f}"  # noqa: E731
  lines = [f"  eval accuracy:   {fmt(get(run_report.EVAL, ACCURACY_NAME))}  (ECE "
           f"{fmt(get(run_report.EVAL, ECE_NAME))}, NLL {fmt(get(run_report.EVAL, NLL_NAME))},"
           " temperature-scaled)"]
  if config.corruptions:
    means = run_report.corrupted_means(values, PROBABILITIES_KEY, config.corruptions)
    lines.append(f"  corrupted:       cA {fmt(means[ACCURACY_NAME])}, cNLL {fmt(means[NLL_NAME])}"
                 f", cECE {fmt(means[ECE_NAME])}")
  return lines


def gate_failures(evaluation_uri: str) -> List[tfma_results.Failure]:
  import tensorflow_model_analysis as tfma
  return tfma_results.failures(tfma.load_validation_result(evaluation_uri))


def score_in_fresh_process(model_dir: str, examples_glob: str) -> dict:
  result = subprocess.run(
      [sys.executable, "-m", "reporting.score_pushed_model", model_dir, examples_glob],
      check=True, capture_output=True, text=True)
  return json.loads(result.stdout.strip().splitlines()[-1])


def summarize_run(config: PipelineConfig, run_id: str, elapsed_seconds: float,
                  log_path: str) -> str:
  """The console summary of run run_id (never "the latest": another run may have started)."""
  run = RunRecord(config, run_id)
  cached = sum(state == "CACHED" for state in run.states.values())
  lines = ["", f"Pipeline {config.pipeline_name} run {run_id} finished in {elapsed_seconds:.0f}s "
           f"({cached} of {len(run.states)} steps reused from cache)."]
  evaluation = run.latest_output("evaluation")
  evaluation_set = run.latest_output("evaluation_set")
  if evaluation is not None:
    lines += gate_summary(config, evaluation.uri)
    lines.append(f"  metrics (TFMA):  {evaluation.uri}")
  blessing = run.latest_output("blessing")
  blessed = blessing is not None and blessing.custom_properties["blessed"].int_value == 1
  if blessing is not None:
    lines.append(f"  blessed:         {'yes' if blessed else 'no, the gate failed:'}")
    if not blessed and evaluation is not None:
      lines += [f"    - {failure.describe()}" for failure in gate_failures(evaluation.uri)]
  pushed = run.latest_output("pushed_model")
  examples = run.latest_output("examples")
  serving = None
  if pushed is not None and pushed.custom_properties["pushed"].int_value == 1:
    serving = pushed.custom_properties["pushed_destination"].string_value
    if run.states.get("Pusher") == "CACHED":  # Pushed by an earlier run of the same model.
      lines.append(f"  pushed model:    none new; the blessed model already serves as {serving}")
    else:
      lines.append(f"  pushed model:    {serving}")
  elif pushed is not None and ALREADY_SERVING_KEY in pushed.custom_properties:
    serving = pushed.custom_properties[ALREADY_SERVING_KEY].string_value
    lines.append(f"  pushed model:    none new; the blessed model already serves as {serving}")
  else:
    lines.append("  pushed model:    nothing pushed this run")
  skipped = read_skipped_files(examples.uri) if examples is not None else []
  if skipped:
    lines.append(f"  skipped images:  {len(skipped)} bad file(s) or folder(s) left out "
                 "(--skip_bad_images; listed in the run report)")
  has_test_split = examples is not None and '"test"' in examples.properties[
      "split_names"].string_value
  if serving is not None and has_test_split:
    test = score_in_fresh_process(serving, os.path.join(examples.uri, "Split-test", "*"))
    lines.append(f"  test accuracy:   {test['accuracy']:.4f} ({test['correct']}/"
                 f"{test['examples']} held-out test examples, served model, fresh process)")
  model = run.candidate_model()
  if model is not None:
    lines.append("  warm-started:    "
                 + run_report.warm_start_summary(os.path.join(model.uri, "Format-Serving")))
  if evaluation is not None:
    report_dir = os.path.join(config.output_dir, "reports", f"run-{run_id}")
    report_path = run_report.write_run_report(
        config, report_dir, evaluation.uri, blessed,
        os.path.join(model.uri, "Format-Serving") if model is not None else None,
        serving if pushed is not None and pushed.custom_properties["pushed"].int_value == 1
        else None, evaluation_set.uri if evaluation_set is not None else None,
        skipped_files=read_skipped_files(examples.uri) if examples is not None else ())
    lines.append(f"  run report:      {report_path}")
  lines.append(f"  serving models:  {config.serving_model_dir}")
  lines.append(f"  MLMD database:   {config.metadata_path}")
  lines.append(f"  pipeline root:   {config.pipeline_root}")
  lines.append(f"  full log:        {log_path}")
  return "\n".join(lines)
