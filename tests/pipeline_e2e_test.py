"""The whole pipeline on a reduced config: trains, evaluates, pushes a model that serves."""
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bench import calibration_goals
from components import drift_baseline
from local_runner.run_record import RunRecord
from pipeline.config import from_flags
from reporting.render import escape_markdown
from test_support import browser
from test_support.graph_ops import augmix_or_random_ops, reachable_op_types
from test_support.tfrecord_inputs import write_digits_tfrecord_dir
from test_support.tiny_config import SMALL_MODEL
from trainer_module.distribution import resolve_precision
from trainer_module.export import PRECISION_FILE, read_record
from trainer_module.reference_corruptions import VALIDATION_CORRUPTIONS
from trainer_module.calibration.record import read_calibration_info

pytestmark = pytest.mark.e2e  # Local pipeline runs.

PIPELINE_COMPONENTS = {"ImageDatasetExampleGen", "SpanCheck", "StatisticsGen", "ClassSchemaGen",
                       "ExampleValidator", "ValidationGate", "DriftBaselineModel", "Transform",
                       "Trainer",
                       "EvaluationSetGen", "Evaluator", "ServedModelCheck", "Pusher",
                       "RunReport"}
_GATE_FAILURE = re.compile(r"- accuracy on eval_set=eval is (\S+); needs >= (\S+) "
                           r"\(short by (\S+)\)")
_CHANGE_FAILURE = re.compile(r"- accuracy on eval_set=eval changed by (\S+) against the blessed "
                             r"baseline; allowed >= (\S+) \(short by (\S+)\)")


def _versions(serving_dir):
  return sorted(os.listdir(serving_dir)) if os.path.isdir(serving_dir) else []


def _file_hashes(directory):
  """{relative path: sha256} of every file, hidden ones included."""
  hashes = {}
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        hashes[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
  return hashes


def _report_path(stdout):
  """The HTML report's copy the summary names."""
  return re.search(r"run report: +(\S+)", stdout).group(1)


def _report_markdown(stdout):
  return open(os.path.join(os.path.dirname(_report_path(stdout)), "report.md")).read()


def _figure(artifact, name):
  value = artifact.custom_properties[name]
  return getattr(value, value.WhichOneof("value"))


def _score(model_dir, examples_glob):
  result = subprocess.run([sys.executable, "-m", "components.serving_client", model_dir,
                           examples_glob], capture_output=True, text=True, check=True)
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_digits_pipeline_pushes_reuses_the_cache_refuses_a_degraded_model_and_warm_starts(
    tmp_path, pipeline_runner):
  flags = [f"--output_dir={tmp_path}", *SMALL_MODEL]
  first = pipeline_runner(*flags)
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  for component in ("ImageDatasetExampleGen", "Transform", "Trainer", "Evaluator", "Pusher"):
    assert f"Component {component} is running." in first.stdout
  assert "step " in first.stdout and "images/s" in first.stdout  # Training progress.
  assert "test accuracy:" in first.stdout

  config = from_flags(flags)
  run = RunRecord(config)
  assert PIPELINE_COMPONENTS <= set(run.states)
  assert {run.states[c] for c in PIPELINE_COMPONENTS} == {"COMPLETE"}
  versions = _versions(config.runner.serving_model_dir)
  assert len(versions) == 1 and versions[0].isdigit()
  pushed = os.path.join(config.runner.serving_model_dir, versions[0])
  assert f"pushed model:    {pushed}" in first.stdout
  # The drift baseline of the data it was trained on travels with the pushed model.
  assert "drift:           no production model" in first.stdout
  assert sorted(os.listdir(drift_baseline.baseline_dir(pushed))) == sorted(drift_baseline.FILES)

  # The pushed model, in a fresh process, on raw serialized tf.Examples of the test split.
  examples = run.latest_output("examples")
  scored = _score(os.path.join(config.runner.serving_model_dir, versions[0]),
                  os.path.join(examples.uri, "Split-test", "*"))
  assert scored["examples"] > 200
  assert scored["accuracy"] > 0.6
  calibration = json.loads((tmp_path / "serving_model" / config.runner.pipeline_name / versions[0] /
                            "assets.extra" / "temperature.json").read_text())
  assert calibration["eval_nll_after"] <= calibration["eval_nll_before"]
  # The preset's distance_detail_curve: a T per input that never falls with its feature
  # distance and reads its detail, fitted on clean eval images and on eval images under the 9
  # validation corruptions x 5 severities, where it is no worse calibrated than the raw softmax.
  assert calibration["temperature_fit"] == "distance_detail_curve"
  assert calibration["distance_curve"]["slope"] >= 0
  assert "detail_slope" in calibration["distance_curve"]
  assert len(calibration["eval_detail_scores"]) == calibration["eval_examples"]
  assert len(calibration["eval_distance_scores"]) == calibration["eval_examples"]
  assert calibration["validation_examples"] == len(VALIDATION_CORRUPTIONS) * 5 * 10
  assert calibration["validation_nll_after"] <= calibration["validation_nll_before"]
  assert calibration["validation_ece_after"] <= calibration["validation_ece_before"]
  precision = read_record(os.path.join(config.runner.serving_model_dir, versions[0]),
                          PRECISION_FILE)
  assert precision["policy"] == resolve_precision(config.trainer).policy  # What this CPU has.
  assert precision["serving_policy"] == "float32"
  report_text = _report_markdown(first.stdout)
  assert "**BLESSED**" in report_text and "**PASSED**" in report_text
  assert f"trained in `{precision['policy']}`" in report_text
  for family in ("noise", "blur", "weather", "digital"):
    assert f"| {family} | " in report_text, "robustness per corruption family"
    family_row = next(line for line in report_text.splitlines()
                      if line.startswith(f"| {family} | "))
    assert family_row.count("(sd ") == 2, "cECE and the gap with their bootstrap deviations"
  assert f"| {escape_markdown('frosted_glass_blur')} | blur |" in report_text, (
      "every corruption's accuracy and ECE")
  assert "| spatter |" not in report_text, "validation corruptions are not evaluated"
  assert "| validation shift (eval images, validation corruptions; chose T) |" in report_text
  # The report is the RunReport step's artifact, its figures recorded on it: what the summary
  # printed, and the served test accuracy the fresh process above measured.
  report = run.latest_output("report")
  assert report.type == "system.HTML" and _figure(report, "display_name") == "run report"
  assert run.latest_output("report_markdown").type == "system.Markdown"
  assert _figure(report, "blessed") == 1 and _figure(report, "pushed") == 1
  assert _figure(report, "pushed_version") == os.path.join(config.runner.serving_model_dir,
                                                           versions[0])
  assert _figure(report, "served_accuracy") == pytest.approx(scored["accuracy"])
  assert f"test accuracy:   {scored['accuracy']:.4f} ({scored['correct']}/" in first.stdout
  for name in ("eval_accuracy", "eval_nll", "eval_ece", "corrupted_accuracy", "corrupted_nll",
               "corrupted_ece", "corrupted_ece_floor", "corrupted_ece_sd"):
    assert f"{_figure(report, name):.4f}" in first.stdout, name
  # bench/calibration_goals reads the run's figures back as the report computed them.
  figures = calibration_goals.read_run(str(tmp_path))
  assert figures.kind == "single" and figures.picks == () and figures.blessed
  assert [figures.cece, figures.cece_sd, figures.cece_floor, figures.cnll] == pytest.approx(
      [_figure(report, name) for name in ("corrupted_ece", "corrupted_ece_sd",
                                          "corrupted_ece_floor", "corrupted_nll")],
      abs=1e-6)  # The artifact's figures come back rounded to six decimal places.
  assert figures.validation_nll == calibration["validation_nll_after"]
  for family, (gap, sd) in figures.family_gaps.items():
    assert f"| {gap:+.4f} (sd {sd:.4f}) |" in next(
        line for line in report_text.splitlines() if line.startswith(f"| {family} | "))
  assert set(figures.family_gaps) == {"noise", "blur", "weather", "digital"}
  clean_test = next(line for line in report_text.splitlines()
                    if line.startswith("| clean test |")).split("|")
  assert [clean_test[4].strip(), clean_test[5].strip()] == [  # The headline's NLL and ECE.
      f"{figures.test_nll:.4f}", f"{figures.test_ece:.4f}"]
  # The HTML page in a real browser: every chart loads from the page itself, nothing leaves it.
  page = browser.open_page(os.path.abspath(_report_path(first.stdout)))
  assert page.content_type == "text/html"
  titles = {alt for alt, _, _ in page.images}
  assert {"clean test, temperature-scaled", "corrupted test, temperature-scaled",
          "per-class accuracy", "accuracy per family and severity",
          "accuracy and ECE per corruption", "temperature and distance"} <= titles
  assert all(loaded and src.startswith("data:image/png") for _, loaded, src in page.images)
  assert page.requests == [] and page.outside_references == []
  assert "BLESSED" in page.text and "Served-model check" in page.text
  assert f"cA {_figure(report, 'corrupted_accuracy'):.4f}" in page.text

  assert "span check:      no model in production: training on span 0" in first.stdout
  assert "## History" in report_text  # The first entry: this run.
  assert "| blessed, pushed |" in report_text and f"| {versions[0]} |" in report_text
  assert json.loads(open(os.path.join(pushed, "assets.extra", "push_info.json")).read())[
      "trained_on"]["span"] == 0

  # Unchanged rerun: nothing new (span 0, the digits, is what production was trained on), so
  # nothing after the span check runs and nothing is pushed; the run succeeds and says so.
  second = pipeline_runner(*flags)
  assert second.returncode == 0, second.stderr[-3000:]
  states = RunRecord(config).states
  assert states["ImageDatasetExampleGen"] == "CACHED" and states["SpanCheck"] == "COMPLETE"
  assert not {"Transform", "Trainer", "Pusher", "RunReport"} & {
      name for name, state in states.items() if state in ("COMPLETE", "CACHED")}
  assert (f"nothing new:     span 0 already in production as version {versions[0]}"
          in second.stdout)
  assert "pushed model:    nothing pushed this run" in second.stdout
  assert _versions(
      config.runner.serving_model_dir) == versions, "the serving model is not pushed twice"
  history = subprocess.run([sys.executable, "-m", "local_runner", "history", flags[0]],
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           capture_output=True, text=True, check=True).stdout
  assert "blessed, pushed" in history and "skipped" in history
  # --force_retrain trains on the same data: the runs below change the training settings.
  flags.append("--force_retrain=true")

  # A degraded candidate (two training steps) is not blessed: nothing is pushed, the serving
  # directory is byte-for-byte unchanged, and the summary says which bound failed by how much.
  # Higher-numbered versions that TF Serving cannot load (a push killed before it wrote
  # anything, one that wrote only variables/) do not hide the model in production: the change
  # bounds are applied against the newest complete version.
  damaged = [os.path.join(config.runner.serving_model_dir, "9999999999"),
             os.path.join(config.runner.serving_model_dir, "9999999998", "variables")]
  for path in damaged:
    os.makedirs(path)
  served = _file_hashes(config.runner.serving_model_dir)
  degraded = pipeline_runner(*flags, "--train_steps=2")
  assert degraded.returncode == 0, degraded.stdout[-3000:] + degraded.stderr[-3000:]
  run = RunRecord(config)
  assert run.states["Trainer"] == "COMPLETE"
  baseline = run.latest_output("model", producer="ProductionModel")
  assert baseline.custom_properties["production_version"].string_value == os.path.join(
      config.runner.serving_model_dir, versions[0]), "compared with the model in production"
  for version in ("9999999999", "9999999998"):
    assert (f"skipping version {os.path.join(config.runner.serving_model_dir, version)}: no "
            "saved_model.pb") in degraded.stdout
  assert run.latest_output("blessing").custom_properties["blessed"].int_value == 0
  assert run.latest_output("pushed_model").custom_properties["pushed"].int_value == 0
  assert _file_hashes(config.runner.serving_model_dir) == served
  assert "blessed:         no, the gate failed:" in degraded.stdout
  # The drift check had production's baseline, the first run's data: the same data, no drift.
  assert run.states["DriftBaselineModel"] == run.states["DriftCheck"] == "COMPLETE"
  assert "drift:           no drift" in degraded.stdout
  value, bound, margin = map(float, _GATE_FAILURE.search(degraded.stdout).groups())
  assert bound == 0.5 and value < bound and margin == pytest.approx(bound - value, abs=2e-4)
  change, allowed, change_margin = map(float, _CHANGE_FAILURE.search(degraded.stdout).groups())
  assert allowed == -0.01 and change_margin == pytest.approx(allowed - change, abs=2e-4)
  assert "pushed model:    nothing pushed this run" in degraded.stdout
  log_path = re.search(r"full log: +(\S+)", degraded.stdout).group(1)
  assert _GATE_FAILURE.search(open(log_path).read()), "the log file names the failure too"
  report = _report_markdown(degraded.stdout)
  assert "**NOT BLESSED**" in report and "against the blessed baseline" in report
  assert f"- accuracy on {escape_markdown('eval_set=eval')} is " in report, (
      "the refused run's report says why")
  assert "A temperature per input: T(x) = exp(" in report  # How T depends on the input.
  assert "## Where the calibrator sharpens and where it softens" in report
  assert "![temperature and distance](data:image/png;base64," in report
  assert RunRecord(config).latest_output("report").custom_properties["blessed"].int_value == 0
  assert re.search(r"\| corrupted test: noise \| \d+ \| ", report), "served distance scores"
  assert "the table's median T reads each image's own detail" in report  # The detail map's.

  # The same two steps warm-started from the model in production (the next run of a schedule)
  # keep what it learned: the accuracy bound the scratch run failed is met, the accuracy stays
  # near production's, and the model records where it started from. This run calibrates with
  # one T for every input (temperature_fit=validation_corruptions), which the Evaluator, gate
  # and report then read from the served model like the default map.
  warm = pipeline_runner(*flags, "--train_steps=2", "--warm_start=production",
                         "--temperature_fit=validation_corruptions")
  assert warm.returncode == 0, warm.stdout[-3000:] + warm.stderr[-3000:]
  run = RunRecord(config)
  assert run.states["WarmStartModel"] == "COMPLETE" and run.states["Trainer"] == "COMPLETE"
  start = run.latest_output("model", producer="WarmStartModel")
  assert start.custom_properties["production_version"].string_value == \
      os.path.join(config.runner.serving_model_dir, versions[0])
  assert "Warm-started from the model in production" in warm.stdout
  assert "optimizer state starts fresh" in warm.stdout
  assert not _GATE_FAILURE.search(warm.stdout), "the absolute accuracy bound is met"
  change = _CHANGE_FAILURE.search(warm.stdout)
  assert change is None or float(change.group(1)) > -0.05
  model = run.latest_output("model", producer="Trainer")
  training = json.loads(open(os.path.join(model.uri, "Format-Serving", "assets.extra",
                                          "training.json")).read())
  assert training["step"] == 2 and training["trainer_config"]["warm_start"] == "production"
  assert training["warm_start"]["source"].startswith("the model in production")
  assert training["warm_start"]["restored_variables"] > 0
  calibration = read_calibration_info(os.path.join(model.uri, "Format-Serving"))
  assert calibration["temperature_fit"] == "validation_corruptions"
  assert "support_radius" not in calibration
  assert calibration["validation_nll_after"] <= calibration["validation_nll_before"]
  assert calibration["validation_ece_after"] <= calibration["validation_ece_before"]
  assert "warm-started:    the model in production" in warm.stdout
  assert "- warm-started from: the model in production" in _report_markdown(warm.stdout)

  # A darker night's data (the same digits at 0.8 of their brightness) with --block_on_drift:
  # the drift is named with its measure, bound and p-value in the summary and the report, with
  # a chart, and the Pusher refuses the candidate.
  served = _file_hashes(config.runner.serving_model_dir)
  darker_dir = write_digits_tfrecord_dir(
      str(tmp_path / "darker"), shift=lambda image: np.round(image * 0.8).astype(np.uint8))
  tfrecord = ["--dataset=tfrecord", "--beam_running_mode=in_memory", "--train_steps=2"]
  darker = pipeline_runner(*flags, *tfrecord, f"--tfrecord_dir={darker_dir}",
                           "--block_on_drift=true")
  assert darker.returncode == 0, darker.stdout[-3000:] + darker.stderr[-3000:]
  assert ("feature(s) moved, the Pusher refused the candidate (--block_on_drift):"
          in darker.stdout)
  assert re.search(r"    - brightness: Jensen-Shannon [0-9.]+ \(bound 0.05\), KS p-value \S+ "
                   r"\(threshold \S+\)", darker.stdout)
  drift = RunRecord(config).latest_output("drift_report")
  assert drift.custom_properties["blocks_push"].int_value == 1
  assert drift.custom_properties["brightness_distance"].double_value > 0.05
  pushed_model = RunRecord(config).latest_output("pushed_model")
  assert pushed_model.custom_properties["pushed"].int_value == 0
  assert "brightness" in pushed_model.custom_properties["refused_for_drift"].string_value
  assert _file_hashes(config.runner.serving_model_dir) == served
  report = _report_markdown(darker.stdout)
  assert "**DRIFT**" in report
  assert escape_markdown("--block_on_drift: the Pusher refuses the candidate.") in report
  assert "![brightness: baseline and new](data:image/png;base64," in report

  # A night that lost a class stops before training, naming it.
  without_seven = write_digits_tfrecord_dir(str(tmp_path / "without_seven"), without_classes=(7,))
  vanished = pipeline_runner(*flags, *tfrecord, f"--tfrecord_dir={without_seven}")
  assert vanished.returncode != 0
  assert ("The class set changed; the run stops before training: class(es) 7 of the data the "
          "model in production" in vanished.stdout + vanished.stderr)
  states = RunRecord(config).states
  assert "Trainer" not in states or states["Trainer"] != "COMPLETE"


def test_tfrecord_input_trains_an_ensemble_on_default_augmix_views_and_serves_it_without_them(
    tmp_path, pipeline_runner):
  """Also the hyper-deep ensemble path: three trial Trainers, two members at most, one model
  gated and pushed like a single one, its members chosen and its curve fitted as the preset
  says (shift_nll, distance_detail_curve)."""
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"))
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--ensemble_size=2", "--hyper_trials=3",
           *SMALL_MODEL]
  result = pipeline_runner(*flags, timeout=2400)  # Three Trainers.
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert result.stdout.count("2 AugMix view(s) per image with JSD") == 3
  for trial in range(3):
    assert f"Component Trainer_trial_{trial} is running." in result.stdout
  config = from_flags(flags)
  trainer = config.trainer
  # AugMix is on by default.
  assert trainer.augmentation.num_views == 2 and trainer.augmentation.augmix_view_sets > 1
  run = RunRecord(config)
  assert run.states["ImportExampleGen"] == "COMPLETE"
  assert run.states["EnsembleSelector"] == run.states["Pusher"] == "COMPLETE"
  assert run.latest_output("blessing").custom_properties["blessed"].int_value == 1
  assert "test accuracy:" in result.stdout
  # Each trial resumes from its own checkpoints.
  assert all(os.listdir(os.path.join(config.runner.pipeline_root, f"Trainer_trial_{trial}",
                                     "checkpoints")) for trial in range(3))

  def first_example(split):
    transformed = tf.data.TFRecordDataset(
        tf.io.gfile.glob(os.path.join(run.latest_output("transformed_examples").uri,
                                      f"Split-{split}", "*")), compression_type="GZIP")
    return tf.train.Example.FromString(next(iter(transformed)).numpy())

  # Compact view sets (a PNG of uint8 channel planes each) for training examples only.
  view_sets = first_example("train").features.feature["augmix_views"].bytes_list.value
  assert [tuple(tf.io.decode_png(views).shape) for views in view_sets] == (
      [(2 * 3 * 32, 32, 1)] * trainer.augmentation.augmix_view_sets)
  eval_sets = first_example("eval").features.feature["augmix_views"].bytes_list.value
  assert list(eval_sets) == [b""] * trainer.augmentation.augmix_view_sets

  version = _versions(config.runner.serving_model_dir)[0]
  pushed = os.path.join(config.runner.serving_model_dir, version)
  record = json.loads(open(os.path.join(pushed, "assets.extra", "ensemble.json")).read())
  assert [trial["name"] for trial in record["trials"]] == [f"Trainer_trial_{i}" for i in range(3)]
  assert len({trial["hyperparameters"]["seed"] for trial in record["trials"]}) == 3
  assert 1 <= len(record["members"]) <= 2
  figures = calibration_goals.read_run(str(tmp_path / "out"))
  assert figures.kind == "ensemble" and list(figures.picks) == record["picks"]
  # Chosen, as the presets choose, on the eval split and the validation shift.
  assert record["objective"] == "shift_nll" and record["selected_on"].endswith(
      f"{len(VALIDATION_CORRUPTIONS) * 5} slices")
  assert record["picks"][0] == min(range(3), key=lambda i: record["trials"][i]["objective_value"])
  calibration = json.loads(open(os.path.join(pushed, "assets.extra", "temperature.json")).read())
  # The distance score is the mean of the members': one support per distinct member.
  radii = np.atleast_1d(calibration["support_radius"])
  assert calibration["temperature_fit"] == "distance_detail_curve"
  assert len(radii) == len(record["members"])
  assert np.all(radii > 0)
  assert sum(member["weight"] for member in record["members"]) == pytest.approx(1.0)
  comparison = record["comparison"]
  assert {"eval", "test", "corrupted"} <= set(comparison["ensemble"])
  assert {"eval", "test", "corrupted"} <= set(comparison["best_single"])
  report = _report_markdown(result.stdout)
  assert "## Ensemble" in report and escape_markdown(
      f"best single trial ({comparison['best_single']['name']})") in report
  assert "| cNLL |" in report and f"| {escape_markdown('shift_nll')} alone |" in report

  serve = tf.saved_model.load(pushed).signatures["serving_default"]
  serving_ops = reachable_op_types(serve)
  assert "Conv2D" in serving_ops
  assert not augmix_or_random_ops(serving_ops)
