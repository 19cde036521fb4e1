"""The report step: its settings travel as JSON; a missing or damaged Evaluator output fails
naming the input."""
import os

import pytest
from tfx.types import standard_artifacts

from components import drift_baseline, span_check
from reporting import figures, run_report


SETTINGS = figures.ReportSettings(
    pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
    corruptions=("fog",), bounds=(figures.GateBound(
        "accuracy", "eval", "accuracy", True, 0.9, 0.01),))


def test_report_settings_travel_as_json():
  assert figures.ReportSettings.from_json(SETTINGS.to_json()) == SETTINGS


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_missing_or_damaged_evaluator_output_fails_naming_it(tmp_path, damage):
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = str(tmp_path / "evaluation")
  if damage == "damaged":
    os.makedirs(evaluation.uri)
    (tmp_path / "evaluation" / "metrics-00000-of-00001.tfrecord").write_bytes(b"not a record")
  inputs = {"evaluation": [evaluation]}
  for key, artifact_class in (("blessing", standard_artifacts.ModelBlessing),
                              ("served_check", standard_artifacts.InfraBlessing),
                              ("model", standard_artifacts.Model),
                              ("pushed_model", standard_artifacts.PushedModel),
                              ("evaluation_set", standard_artifacts.Examples),
                              ("input_examples", standard_artifacts.Examples),
                              ("span_decision", span_check.SpanDecision),
                              ("drift", drift_baseline.DriftReport)):
    artifact = artifact_class()
    artifact.uri = str(tmp_path / key)
    inputs[key] = [artifact]
  outputs = {"report": [run_report.HtmlReport()],
             "report_markdown": [run_report.MarkdownReport()]}
  for name, (artifact,) in outputs.items():
    artifact.uri = str(tmp_path / name / "value")
  executor = run_report.RunReport.EXECUTOR_SPEC.executor_class()
  with pytest.raises(ValueError, match=f"RunReport: input 'evaluation' at {evaluation.uri}"):
    executor.Do(inputs, outputs, {"settings": SETTINGS.to_json(),
                                  "history_dir": str(tmp_path / "history")})
  assert not os.path.exists(tmp_path / "history")  # No entry for a run it cannot report.
