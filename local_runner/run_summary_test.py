"""The console summary of a run, from its report artifact's recorded figures (as
reporting/run_report.py records them), and the report's copies a browser and an editor open."""
import json
import os
import types

import pytest

from reporting.run_report import (GATE_FAILURES, SERVED_CHECK_PROBLEMS, HtmlReport,
                                   record_headline)
from pipeline.config import from_flags
from local_runner.run_summary import report_lines

BLESSED_AND_PUSHED = {
    "eval_accuracy": 0.98765, "eval_ece": 0.0123, "eval_nll": 0.0456,
    "corrupted_accuracy": 0.8812, "corrupted_nll": 0.3719, "corrupted_ece": 0.0604,
    "corrupted_ece_floor": 0.0231, "corrupted_ece_sd": 0.0024,
    "evaluation_uri": "/runs/Evaluator/evaluation/7",
    "blessed": 1, "served_check_passed": 1, "pushed": 1, "pushed_version": "/serving/1700000000",
    "served_split": "test", "served_accuracy": 290 / 292, "served_correct": 290,
    "served_examples": 292, "warm_start": "no, trained from scratch", "skipped_images": 0,
    GATE_FAILURES: "[]", SERVED_CHECK_PROBLEMS: "[]"}


def _artifact(uri, figures=None):
  """The MLMD artifact of a report holding the figures as the RunReport step records them."""
  artifact = HtmlReport()
  artifact.uri = str(uri)
  record_headline(artifact, figures or {})
  return artifact.mlmd_artifact


def _run(tmp_path, figures, pusher_state="COMPLETE"):
  """A RunRecord stand-in: run-7, whose report (HTML and Markdown files) holds `figures`."""
  (tmp_path / "report").write_text("<html>report</html>")
  (tmp_path / "report_markdown").write_text("# report")
  outputs = {"report": _artifact(tmp_path / "report", figures),
             "report_markdown": _artifact(tmp_path / "report_markdown")}
  return types.SimpleNamespace(run_id="run-7", states={"Pusher": pusher_state},
                               latest_output=lambda key, producer=None: outputs.get(key))


@pytest.fixture
def config(tmp_path):
  return from_flags([f"--output_dir={tmp_path / 'outputs'}"])


def test_a_blessed_and_pushed_run_gives_its_figures_the_new_version_and_the_report_s_copies(
    tmp_path, config):
  lines = report_lines(config, _run(tmp_path, BLESSED_AND_PUSHED))
  report_dir = os.path.join(config.runner.output_dir, "reports", "run-run-7")
  assert lines == [
      "  eval accuracy:   0.9877  (ECE 0.0123, NLL 0.0456, temperature-scaled)",
      "  corrupted:       cA 0.8812, cNLL 0.3719, cECE 0.0604 (floor 0.0231, bootstrap sd "
      "0.0024)",
      "  metrics (TFMA):  /runs/Evaluator/evaluation/7",
      "  blessed:         yes",
      "  pushed model:    /serving/1700000000",
      "  test accuracy:   0.9932 (290/292 held-out test examples, served model, fresh process)",
      "  warm-started:    no, trained from scratch",
      f"  run report:      {os.path.join(report_dir, 'report.html')}",
      f"  report artifact: {tmp_path / 'report'}"]
  with open(os.path.join(report_dir, "report.html")) as html, \
       open(os.path.join(report_dir, "report.md")) as markdown:
    assert (html.read(), markdown.read()) == ("<html>report</html>", "# report")


def test_a_refused_run_says_why_and_that_nothing_was_pushed(tmp_path, config):
  figures = {**BLESSED_AND_PUSHED, "blessed": 0, "served_check_passed": 0, "pushed": 0,
             "pushed_version": "", "skipped_images": 2,
             GATE_FAILURES: json.dumps(["cECE 0.2100 above its bound 0.1500"]),
             SERVED_CHECK_PROBLEMS: json.dumps(["the served model answered 3 of 292 wrongly"])}
  lines = report_lines(config, _run(tmp_path, figures))
  at = lines.index("  blessed:         no, the gate failed:")
  assert lines[at + 1:at + 6] == [
      "    - cECE 0.2100 above its bound 0.1500",
      "  served check:    failed, the Pusher pushed nothing:",
      "    - the served model answered 3 of 292 wrongly",
      "  pushed model:    nothing pushed this run",
      "  skipped images:  2 bad file(s) or folder(s) left out (--skip_bad_images; listed in the "
      "run report)"]
  assert not any(line.startswith("  test accuracy:") for line in lines)  # Nothing serves.


def test_a_model_pushed_by_an_earlier_run_is_named_as_already_serving(tmp_path, config):
  lines = report_lines(config, _run(tmp_path, BLESSED_AND_PUSHED, pusher_state="CACHED"))
  assert ("  pushed model:    none new; the blessed model already serves as /serving/1700000000"
          in lines)


def test_figures_not_recorded_say_so_and_a_run_without_corruptions_has_no_corrupted_line(
    tmp_path):
  config = from_flags([f"--output_dir={tmp_path / 'outputs'}", "--corruptions="])
  figures = {k: v for k, v in BLESSED_AND_PUSHED.items() if k != "eval_nll"}
  lines = report_lines(config, _run(tmp_path, figures))
  assert lines[0] == "  eval accuracy:   0.9877  (ECE 0.0123, NLL not found, temperature-scaled)"
  assert not any(line.startswith("  corrupted:") for line in lines)


def test_a_run_whose_evaluator_made_no_bootstrap_gives_cece_with_its_floor_alone(tmp_path,
                                                                                config):
  figures = {k: v for k, v in BLESSED_AND_PUSHED.items() if k != "corrupted_ece_sd"}
  assert report_lines(config, _run(tmp_path, figures))[1] == (
      "  corrupted:       cA 0.8812, cNLL 0.3719, cECE 0.0604 (floor 0.0231)")


def test_a_run_without_a_report_says_so():
  run = types.SimpleNamespace(latest_output=lambda key, producer=None: None)
  assert report_lines(from_flags([]), run) == [
      "  run report:      none: the run recorded no report"]


def _decision_run(train, reason):
  """A RunRecord stand-in whose span check decided `train` for `reason`."""
  from components.span_check import SpanDecision
  decision = SpanDecision()
  decision.set_int_custom_property("train", train)
  decision.set_string_custom_property("reason", reason)
  outputs = {"decision": decision.mlmd_artifact}
  return types.SimpleNamespace(run_id="run-8", states={},
                               latest_output=lambda key, producer=None: outputs.get(key))


def test_a_run_that_trained_nothing_says_why_and_that_nothing_was_pushed():
  from local_runner.run_summary import span_check_lines
  reason = "span 20261201 already in production as version 1764720000; nothing new to train on"
  assert span_check_lines(_decision_run(0, reason)) == [
      f"  nothing new:     {reason}",
      "  trained:         nothing (the steps after the span check were skipped)",
      "  pushed model:    nothing pushed this run"]


def test_a_run_the_span_check_let_train_gets_the_reports_lines():
  from local_runner.run_summary import span_check_lines
  assert span_check_lines(_decision_run(1, "no model in production")) is None
  no_check = types.SimpleNamespace(latest_output=lambda key, producer=None: None)
  assert span_check_lines(no_check) is None


def test_the_span_read_and_the_train_window_come_from_the_examples_artifact(tmp_path, config):
  from tfx.types import standard_artifacts
  examples = standard_artifacts.Examples()
  examples.set_int_custom_property("span", 20788)
  examples.set_string_custom_property("train_window", json.dumps([
      {"span": 20788, "version": None, "folder": "/photos/2026-12-01", "train_examples": 70},
      {"span": 20787, "version": None, "folder": "/photos/2026-11-30", "train_examples": 68}]))
  run = _run(tmp_path, BLESSED_AND_PUSHED)
  outputs = {"examples": examples.mlmd_artifact}
  with_examples = types.SimpleNamespace(
      run_id=run.run_id, states=run.states,
      latest_output=lambda key, producer=None: outputs.get(key) or run.latest_output(key))
  lines = report_lines(config, with_examples)
  assert lines[0] == ("  data read:       span 20788 (/photos/2026-12-01); train split from 2 "
                      "spans: 20788 (70 examples), 20787 (68 examples)")
  assert not report_lines(config, run)[0].startswith("  data read:")  # No Examples, no line.
  plain = standard_artifacts.Examples()
  plain.set_int_custom_property("span", 0)  # TFX's span of a source without spans.
  outputs["examples"] = plain.mlmd_artifact
  assert not report_lines(config, with_examples)[0].startswith("  data read:")


def test_drift_is_named_with_its_bound_and_p_value_and_whether_it_refused_the_push(
    tmp_path, config):
  from reporting.run_report import DRIFT_MOVED, DRIFT_STATUS
  moved = ["brightness: Jensen-Shannon 0.4908 (bound 0.05), KS p-value 2e-186 (threshold "
           "0.00111)"]
  for blocked, action in ((0, "a warning: the gate decided the push"),
                          (1, "the Pusher refused the candidate (--block_on_drift)")):
    figures = {**BLESSED_AND_PUSHED, DRIFT_STATUS: "drift", DRIFT_MOVED: json.dumps(moved),
               "drift_blocked_push": blocked}
    lines = report_lines(config, _run(tmp_path, figures))
    at = lines.index(f"  drift:           1 feature(s) moved, {action}:")
    assert lines[at + 1] == f"    - {moved[0]}"
  quiet = {**BLESSED_AND_PUSHED, DRIFT_STATUS: "no production model", DRIFT_MOVED: "[]"}
  assert "  drift:           no production model" in report_lines(config, _run(tmp_path, quiet))
