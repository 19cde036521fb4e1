"""The console summary of a finished local run, read back from the run's report artifact (the
RunReport step, reporting/run_report.py) in MLMD: the same figures a Kubeflow run's report
records, from the same code."""
from __future__ import annotations

import json
import os
import shutil
from typing import List, Optional

from local_runner.run_record import RunRecord
from pipeline.config import PipelineConfig
from reporting.run_report import DRIFT_MOVED, DRIFT_STATUS, GATE_FAILURES, SERVED_CHECK_PROBLEMS
from reporting.sections import span_summary


def _value(artifact, name: str):
  """A custom property of an MLMD artifact as a Python value; None when absent."""
  if name not in artifact.custom_properties:
    return None
  value = artifact.custom_properties[name]
  return getattr(value, value.WhichOneof("value"))


def _fmt(value: Optional[float]) -> str:
  return "not found" if value is None else f"{value:.4f}"


def report_lines(config: PipelineConfig, run: RunRecord) -> List[str]:
  """The gate's numbers, the decision and why, what was pushed and how it serves."""
  report = run.latest_output("report")
  if report is None:
    return ["  run report:      none: the run recorded no report"]
  get = lambda name: _value(report, name)  # noqa: E731
  lines = data_lines(run) + [f"  eval accuracy:   {_fmt(get('eval_accuracy'))}  (ECE {_fmt(get('eval_ece'))}, "
           f"NLL {_fmt(get('eval_nll'))}, temperature-scaled)"]
  if config.evaluation.corruptions:
    lines.append(f"  corrupted:       cA {_fmt(get('corrupted_accuracy'))}, cNLL "
                 f"{_fmt(get('corrupted_nll'))}, cECE {_fmt(get('corrupted_ece'))} (floor "
                 f"{_fmt(get('corrupted_ece_floor'))}" + (
                     f", bootstrap sd {_fmt(get('corrupted_ece_sd'))})"
                     if get('corrupted_ece_sd') is not None else ")"))
  lines.append(f"  metrics (TFMA):  {get('evaluation_uri')}")
  blessed = get("blessed") == 1
  lines.append(f"  blessed:         {'yes' if blessed else 'no, the gate failed:'}")
  if not blessed:
    lines += [f"    - {failure}" for failure in json.loads(get(GATE_FAILURES) or "[]")]
  if get("served_check_passed") != 1:
    lines.append("  served check:    failed, the Pusher pushed nothing:")
    lines += [f"    - {problem}" for problem in json.loads(get(SERVED_CHECK_PROBLEMS) or "[]")]
  lines += drift_lines(get)
  serving = get("pushed_version") or None
  if get("pushed") == 1 and run.states.get("Pusher") != "CACHED":
    lines.append(f"  pushed model:    {serving}")
  elif serving:  # Pushed by an earlier run of the same model.
    lines.append(f"  pushed model:    none new; the blessed model already serves as {serving}")
  else:
    lines.append("  pushed model:    nothing pushed this run")
  if get("skipped_images"):
    lines.append(f"  skipped images:  {get('skipped_images')} bad file(s) or folder(s) left out "
                 "(--skip_bad_images; listed in the run report)")
  if serving and get("served_split") == "test" and get("served_accuracy") is not None:
    lines.append(f"  test accuracy:   {get('served_accuracy'):.4f} ({get('served_correct')}/"
                 f"{get('served_examples')} held-out test examples, served model, fresh "
                 "process)")
  lines.append(f"  warm-started:    {get('warm_start')}")
  lines.append(f"  run report:      {copy_report(config, run, report)}")
  lines.append(f"  report artifact: {report.uri}")
  return lines


def data_lines(run: RunRecord) -> List[str]:
  """The span (and version) ExampleGen read and the spans of the train split, from its
  Examples artifact; nothing for a source without spans."""
  examples = run.latest_output("examples")
  if examples is None:
    return []
  window = _value(examples, "train_window")
  summary = span_summary(_value(examples, "span"), _value(examples, "version"),
                         json.loads(window) if window else ())
  return [f"  data read:       {summary}"] if summary else []


def drift_lines(get) -> List[str]:
  """What moved from the data the model in production was trained on, by how much, against
  which bound, with which p-value; and whether that refused the push."""
  status = get(DRIFT_STATUS)
  if status is None:
    return []
  moved = json.loads(get(DRIFT_MOVED) or "[]")
  if not moved:
    return [f"  drift:           {status}"]
  action = ("the Pusher refused the candidate (--block_on_drift)" if get("drift_blocked_push")
            == 1 else "a warning: the gate decided the push")
  return [f"  drift:           {len(moved)} feature(s) moved, {action}:"] + [
      f"    - {sentence}" for sentence in moved]


def copy_report(config: PipelineConfig, run: RunRecord, report) -> str:
  """Copies the report artifacts (files without an extension, as TFX names a value artifact)
  to <output_dir>/reports/run-<id>/report.html and report.md, which a browser and an editor
  open as what they are; returns the HTML copy's path."""
  report_dir = os.path.join(config.runner.reports_dir, f"run-{run.run_id}")
  os.makedirs(report_dir, exist_ok=True)
  markdown = run.latest_output("report_markdown")
  for artifact, name in ((report, "report.html"), (markdown, "report.md")):
    if artifact is not None:
      shutil.copyfile(artifact.uri, os.path.join(report_dir, name))
  return os.path.join(report_dir, "report.html")


def span_check_lines(run: RunRecord) -> Optional[List[str]]:
  """What the span check decided: None when it let the run train (the report's lines follow),
  else the lines that say why nothing was trained."""
  decision = run.latest_output("decision")
  if decision is None:
    return None
  train, reason = _value(decision, "train"), _value(decision, "reason") or ""
  if train == 1:
    return None
  return [f"  nothing new:     {reason}",
          "  trained:         nothing (the steps after the span check were skipped)",
          "  pushed model:    nothing pushed this run"]


def summarize_run(config: PipelineConfig, run_id: str, elapsed_seconds: float,
                  log_path: str) -> str:
  """The console summary of run run_id (never "the latest": another run may have started)."""
  run = RunRecord(config, run_id)
  cached = sum(state == "CACHED" for state in run.states.values())
  lines = [
      "", f"Pipeline {config.runner.pipeline_name} run {run_id} finished in {elapsed_seconds:.0f}s "
      f"({cached} of {len(run.states)} steps reused from cache)."
  ]
  decision = run.latest_output("decision")
  skipped = span_check_lines(run)
  if skipped is not None:
    lines += skipped
  else:
    if decision is not None:
      lines.append(f"  span check:      {_value(decision, 'reason')}")
    lines += report_lines(config, run)
  lines.append(f"  run history:     {config.runner.history_directory} "
               f"(python -m local_runner history --output_dir={config.runner.output_dir})")
  lines.append(f"  serving models:  {config.runner.serving_model_dir}")
  lines.append(f"  MLMD database:   {config.runner.metadata_path}")
  lines.append(f"  pipeline root:   {config.runner.pipeline_root}")
  lines.append(f"  full log:        {log_path}")
  return "\n".join(lines)
