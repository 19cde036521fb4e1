"""The report step's page: self-contained in a real browser; its settings travel as JSON; a
missing or damaged Evaluator output fails naming the input."""
import os

import numpy as np
import pytest
from tfx.types import standard_artifacts

from components import plots, report_sections, run_report
from testing import browser


def test_the_html_page_shows_its_charts_from_itself_in_a_browser(tmp_path):
  chart_dir = tmp_path / "charts"
  chart_dir.mkdir()
  plots.reliability_diagram(str(chart_dir / "reliability_test.png"),
                            np.array([[0, 0, 0], [3, 0.4, 0.3], [10, 0.9, 1.0]]), "test")
  plots.bar_chart(str(chart_dir / "per_class.png"), [0, 1], {"test": [0.5, 0.9]}, "per class",
                  "accuracy")
  lines = ["# Run report: p", "", "## Gate", "", "**NOT BLESSED**: the Pusher pushes nothing.",
           "", "| set | accuracy |", "| --- | --- |", "| clean eval | 0.8123 |", "",
           "![clean test, temperature-scaled](reliability_test.png)", "",
           "![per-class accuracy](per_class.png)"]
  text = run_report.inline_charts(lines, str(chart_dir))
  assert "](reliability_test.png)" not in text and text.count("](data:image/png;base64,") == 2
  page_path = tmp_path / "report.html"
  page_path.write_text(run_report.html_page("Run report: p", text))

  page = browser.open_page(str(page_path))
  assert page.content_type == "text/html"
  assert [(alt, loaded) for alt, loaded, _ in page.images] == [
      ("clean test, temperature-scaled", True), ("per-class accuracy", True)]
  assert page.requests == [] and page.outside_references == []
  assert "NOT BLESSED: the Pusher pushes nothing." in page.text
  assert "clean eval 0.8123" in page.text  # A table, rendered as one.


def test_the_browser_check_sees_a_chart_that_points_outside_the_page(tmp_path):
  """The check above is not vacuous: a page whose chart is a remote URL fails it."""
  page_path = tmp_path / "report.html"
  page_path.write_text(run_report.html_page(
      "r", "![chart](http://example.com/chart.png)"))
  page = browser.open_page(str(page_path))
  assert page.images == [("chart", False, "http://example.com/cha")]
  assert page.outside_references == ["http://example.com/chart.png"]


SETTINGS = report_sections.ReportSettings(
    pipeline_name="p", dataset="digits", model="WRN-10-1", num_classes=10,
    corruptions=("fog",), bounds=(report_sections.GateBound(
        "accuracy", "eval", "accuracy", True, 0.9, 0.01),))


def test_report_settings_travel_as_json():
  assert report_sections.ReportSettings.from_json(SETTINGS.to_json()) == SETTINGS


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
                              ("input_examples", standard_artifacts.Examples)):
    artifact = artifact_class()
    artifact.uri = str(tmp_path / key)
    inputs[key] = [artifact]
  outputs = {"report": [run_report.HtmlReport()],
             "report_markdown": [run_report.MarkdownReport()]}
  for name, (artifact,) in outputs.items():
    artifact.uri = str(tmp_path / name / "value")
  executor = run_report.RunReport.EXECUTOR_SPEC.executor_class()
  with pytest.raises(ValueError, match=f"RunReport: input 'evaluation' at {evaluation.uri}"):
    executor.Do(inputs, outputs, {"settings": SETTINGS.to_json()})
