"""The run report as a pipeline step, so every runner gets it, cached with the run: HTML and
Markdown artifacts that the KFP UI renders (docs/pipeline.md, "The run report").
"""
import json
import os
from typing import Dict, Optional

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.io import fileio
from tfx.types import artifact as artifact_lib
from tfx.types import standard_artifacts
from tfx.types.value_artifact import ValueArtifact
from tfx.utils import path_utils

import tensorflow_model_analysis as tfma

from components import drift_baseline, run_history, served_model_check, serving_versions, \
    span_check, tfma_results
from components.drift_baseline import DriftReport
from components.example_gen import read_skipped_files, read_train_window
from components.pusher import ALREADY_SERVING_KEY
from reporting import figures, render, sections
from storage.object_storage import is_object_store_uri

DISPLAY_NAME = "display_name"  # What the KFP UI lists an HTML or Markdown artifact by.
GATE_FAILURES = "gate_failures"  # JSON list of the bounds missed, as sentences.
SERVED_CHECK_PROBLEMS = "served_check_problems"  # JSON list.
DRIFT_STATUS = "drift_status"  # The DriftCheck's status (components/drift_baseline.py).
DRIFT_MOVED = "drift_moved"  # JSON list of the moved features, as sentences.


class _TextFile(ValueArtifact):
  """A text file at the artifact's URI."""

  def encode(self, value: str) -> bytes:
    return value.encode("utf-8")

  def decode(self, serialized_value: bytes) -> str:
    return serialized_value.decode("utf-8")


class HtmlReport(_TextFile):
  TYPE_NAME = "system.HTML"


class MarkdownReport(_TextFile):
  TYPE_NAME = "system.Markdown"


def _property(artifact: artifact_lib.Artifact, name: str):
  """A custom property's value whichever type the orchestrator stored it as, or None (on
  Kubeflow numbers come back from MLMD as doubles)."""
  return artifact.get_custom_property(name) if artifact.has_custom_property(name) else None


def _load(name: str, uri: str, loader):
  try:
    return loader(uri)
  except Exception as error:
    raise ValueError(f"RunReport: input '{name}' at {uri} cannot be read ({type(error).__name__}:"
                     f" {error}); is it the output of a finished step?") from error


def _write(artifact: _TextFile, text: str, display_name: str) -> None:
  if fileio.isdir(artifact.uri):  # A directory an orchestrator made for it.
    fileio.rmtree(artifact.uri)
  if not is_object_store_uri(artifact.uri):  # Object stores have no directories to make.
    fileio.makedirs(os.path.dirname(artifact.uri))
  artifact.value = text
  artifact.set_string_custom_property(DISPLAY_NAME, display_name)


def record_headline(report: artifact_lib.Artifact, recorded: Dict[str, float]) -> None:
  for name, value in recorded.items():
    if isinstance(value, str):
      report.set_string_custom_property(name, value)
    elif isinstance(value, bool) or isinstance(value, int):
      report.set_int_custom_property(name, int(value))
    else:
      report.set_float_custom_property(name, float(value))


def history_entry(decision: dict, headline: Dict[str, float], blessed: bool, pushed: bool,
                  serving: Optional[str], failures, check: dict,
                  train_window=None) -> run_history.Entry:
  """This run's entry in the run history: the span it trained on, what became of the model and
  why, and its gated figures (figures.headline)."""
  if pushed:
    reason = decision["reason"]
  elif not blessed:
    reason = "; ".join(failure.describe() for failure in failures) or "the gate failed"
  elif not check["passed"]:
    reason = "served-model check failed: " + "; ".join(check["problems"])
  elif serving:
    reason = f"the blessed model already serves as {serving}"
  else:
    reason = "nothing pushed"
  return run_history.Entry(
      time=run_history.now(), run_id=decision["run_id"], span=decision["span"],
      data_version=decision["data_version"],
      outcome=run_history.PUSHED if pushed else run_history.NOT_PUSHED, reason=reason,
      blessed=blessed, pushed_version=os.path.basename(serving.rstrip("/")) if serving else None,
      train_window=serving_versions.window_spans(train_window),
      accuracy=headline.get("eval_accuracy"), nll=headline.get("eval_nll"),
      ece=headline.get("eval_ece"), corrupted_accuracy=headline.get("corrupted_accuracy"),
      corrupted_nll=headline.get("corrupted_nll"), corrupted_ece=headline.get("corrupted_ece"))


@component
def RunReport(  # pylint: disable=invalid-name
    evaluation: InputArtifact[standard_artifacts.ModelEvaluation],
    blessing: InputArtifact[standard_artifacts.ModelBlessing],
    served_check: InputArtifact[standard_artifacts.InfraBlessing],
    model: InputArtifact[standard_artifacts.Model],
    pushed_model: InputArtifact[standard_artifacts.PushedModel],
    evaluation_set: InputArtifact[standard_artifacts.Examples],
    input_examples: InputArtifact[standard_artifacts.Examples],
    span_decision: InputArtifact[span_check.SpanDecision],
    report: OutputArtifact[HtmlReport],
    report_markdown: OutputArtifact[MarkdownReport],
    settings: Parameter[str],
    history_dir: Parameter[str],
    history_runs: Parameter[int] = run_history.DEFAULT_RUNS,
    drift: InputArtifact[DriftReport] = None) -> None:
  """Writes the run's entry in the run history (history_dir), then the run's report with the
  last history_runs runs, and records its headline figures on it. input_examples: ExampleGen's,
  for the image files an image_dir run left out (skip_bad_images); span_decision: the span
  check's, for the span the run trained on; drift: the DriftCheck's result (none with
  --drift_check=false)."""
  report_settings = figures.ReportSettings.from_json(settings)
  values = _load("evaluation", evaluation.uri, tfma_results.load_metrics)
  if not values:
    raise ValueError(f"RunReport: input 'evaluation' at {evaluation.uri} holds no metrics.")
  check = _load("served_check", served_check.uri, served_model_check.read_result)
  try:
    failures = tfma_results.failures(tfma.load_validation_result(evaluation.uri))
  except Exception:  # No thresholds, no validation file: nothing to explain.
    failures = []
  blessed = _property(blessing, "blessed") == 1
  pushed = _property(pushed_model, "pushed") == 1
  serving: Optional[str] = (_property(pushed_model, "pushed_destination") if pushed
                            else _property(pushed_model, ALREADY_SERVING_KEY))
  model_dir = path_utils.serving_model_path(model.uri)
  served = sections.ServedCheck(
      passed=check["passed"], split=check["split"], accuracy=check["accuracy"],
      correct=check["correct"], examples=check["examples"],
      evaluator_accuracy=check["evaluator_accuracy"], tolerance=check["tolerance"],
      problems=tuple(check["problems"]))
  skipped = _load("input_examples", input_examples.uri, read_skipped_files)
  headline = figures.headline(report_settings, values)
  drift_result = _load("drift", drift.uri, drift_baseline.read_result) if drift else None
  decision = span_check.read_decision(span_decision)
  history = []
  if history_dir:
    run_history.append(history_dir, history_entry(
        decision, headline, blessed, pushed, serving, failures, check,
        _property(input_examples, "train_window")))
    history = run_history.read(history_dir, history_runs)
  span, version = (None if _property(input_examples, name) is None
                   else int(_property(input_examples, name)) for name in ("span", "version"))
  input_span = sections.span_summary(span, version, read_train_window(input_examples))
  document = sections.run_report(report_settings, evaluation.uri, blessed, model_dir,
                                 serving if pushed else None, evaluation_set.uri, served, skipped,
                                 input_span, history, decision["reason"] or None,
                                 drift_result)
  _write(report, render.to_html(document), "run report")
  _write(report_markdown, render.to_markdown(document), "run report (Markdown)")
  recorded = {**headline, "span": decision["span"], "span_check": decision["reason"],
                      "blessed": blessed, "served_check_passed": bool(check["passed"]),
                      "pushed": pushed, "pushed_version": serving or "",
                      "served_split": check["split"], "served_correct": check["correct"],
                      "served_examples": check["examples"],
                      "warm_start": sections.warm_start_summary(model_dir),
                      "evaluation_uri": evaluation.uri, "skipped_images": len(skipped),
                      "input_span_summary": input_span or "",
                      GATE_FAILURES: json.dumps([failure.describe() for failure in failures]),
                      SERVED_CHECK_PROBLEMS: json.dumps(check["problems"]),
                      DRIFT_STATUS: drift_result["status"] if drift_result else "not checked",
                      DRIFT_MOVED: json.dumps(drift_result["moved"] if drift_result else []),
                      "drift_blocked_push": bool(drift_result and drift_result["blocks_push"])}
  if check["accuracy"] is not None:
    recorded["served_accuracy"] = check["accuracy"]
  record_headline(report, recorded)
