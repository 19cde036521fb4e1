"""The run report as a pipeline step, so every runner gets it, cached with the run: HTML and
Markdown artifacts that the KFP UI renders (docs/pipeline.md, "The run report").
"""
import base64
import html
import json
import os
import re
import tempfile
from typing import Dict, List, Optional

import markdown
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.io import fileio
from tfx.types import artifact as artifact_lib
from tfx.types import standard_artifacts
from tfx.types.value_artifact import ValueArtifact
from tfx.utils import path_utils

import tensorflow_model_analysis as tfma

from components import report_sections, served_model_check, tfma_results
from components.example_gen import read_skipped_files
from components.pusher import ALREADY_SERVING_KEY
from storage.object_storage import is_object_store_uri

DISPLAY_NAME = "display_name"  # What the KFP UI lists an HTML or Markdown artifact by.
GATE_FAILURES = "gate_failures"  # JSON list of the bounds missed, as sentences.
SERVED_CHECK_PROBLEMS = "served_check_problems"  # JSON list.
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")
_STYLE = ("body{font-family:sans-serif;max-width:70em;margin:2em auto;padding:0 1em;"
          "line-height:1.4}table{border-collapse:collapse;margin:1em 0}"
          "th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}img{max-width:100%}")


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


def inline_charts(lines: List[str], chart_dir: str) -> str:
  """The Markdown with every chart `![title](file.png)` as a data: URI."""
  def data_uri(match):
    with open(os.path.join(chart_dir, match.group(2)), "rb") as f:
      encoded = base64.b64encode(f.read()).decode("ascii")
    return f"![{match.group(1)}](data:image/png;base64,{encoded})"
  return _IMAGE.sub(data_uri, "\n".join(lines))


def html_page(title: str, markdown_text: str) -> str:
  """A page that needs nothing outside itself."""
  body = markdown.markdown(markdown_text, extensions=["tables"])
  return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
          f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
          f"<body>\n{body}\n</body></html>\n")


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


def record_headline(report: artifact_lib.Artifact, figures: Dict[str, float]) -> None:
  for name, value in figures.items():
    if isinstance(value, str):
      report.set_string_custom_property(name, value)
    elif isinstance(value, bool) or isinstance(value, int):
      report.set_int_custom_property(name, int(value))
    else:
      report.set_float_custom_property(name, float(value))


@component
def RunReport(  # pylint: disable=invalid-name
    evaluation: InputArtifact[standard_artifacts.ModelEvaluation],
    blessing: InputArtifact[standard_artifacts.ModelBlessing],
    served_check: InputArtifact[standard_artifacts.InfraBlessing],
    model: InputArtifact[standard_artifacts.Model],
    pushed_model: InputArtifact[standard_artifacts.PushedModel],
    evaluation_set: InputArtifact[standard_artifacts.Examples],
    input_examples: InputArtifact[standard_artifacts.Examples],
    report: OutputArtifact[HtmlReport],
    report_markdown: OutputArtifact[MarkdownReport],
    settings: Parameter[str]) -> None:
  """Writes the run's report and records its headline figures on it. input_examples:
  ExampleGen's, for the image files an image_dir run left out (skip_bad_images)."""
  report_settings = report_sections.ReportSettings.from_json(settings)
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
  served = report_sections.ServedCheck(
      passed=check["passed"], split=check["split"], accuracy=check["accuracy"],
      correct=check["correct"], examples=check["examples"],
      evaluator_accuracy=check["evaluator_accuracy"], tolerance=check["tolerance"],
      problems=tuple(check["problems"]))
  skipped = _load("input_examples", input_examples.uri, read_skipped_files)
  with tempfile.TemporaryDirectory() as chart_dir:
    lines = report_sections.run_report_markdown(
        report_settings, chart_dir, evaluation.uri, blessed, model_dir,
        serving if pushed else None, evaluation_set.uri, served, skipped)
    text = inline_charts(lines, chart_dir)
  _write(report, html_page(f"Run report: {report_settings.pipeline_name}", text), "run report")
  _write(report_markdown, text, "run report (Markdown)")
  figures = {**report_sections.headline(report_settings, values),
             "blessed": blessed, "served_check_passed": bool(check["passed"]),
             "pushed": pushed, "pushed_version": serving or "",
             "served_split": check["split"], "served_correct": check["correct"],
             "served_examples": check["examples"],
             "warm_start": report_sections.warm_start_summary(model_dir),
             "evaluation_uri": evaluation.uri, "skipped_images": len(skipped),
             GATE_FAILURES: json.dumps([failure.describe() for failure in failures]),
             SERVED_CHECK_PROBLEMS: json.dumps(check["problems"])}
  if check["accuracy"] is not None:
    figures["served_accuracy"] = check["accuracy"]
  record_headline(report, figures)
