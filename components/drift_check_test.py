"""The DriftCheck step: no production model passes; the baseline it writes travels through the
Pusher into the pushed version and back through ProductionModel; a darker night is named; a
vanished class stops the run; --block_on_drift makes the Pusher refuse."""
import json
import os
import shutil

import pytest
import tensorflow as tf
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components import drift, drift_baseline, drift_check, pusher
from components.production_model import ProductionModelExecutor
from test_support import drift_baselines

LIMITS = dict(max_category_distance=0.03, max_image_divergence=0.05, drift_p_value=0.01,
              sample_size=2000)

_digits = drift_baselines.digits
_examples = drift_baselines.examples
_statistics = drift_baselines.statistics
_schema = drift_baselines.schema


class _BrightnessModel(tf.Module):
  """A served model whose softmax follows the mean brightness of the image."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(self, examples):
    images = tf.io.parse_example(examples, {"image": tf.io.FixedLenFeature([], tf.string)})
    pixels = tf.map_fn(lambda png: tf.cast(tf.io.decode_png(png, channels=3), tf.float32),
                       images["image"], fn_output_signature=tf.float32)
    mean = tf.reduce_mean(pixels, axis=[1, 2, 3]) / 255.0
    logits = tf.stack([20.0 * mean, -20.0 * mean, tf.zeros_like(mean)], axis=1)
    return {"probabilities": tf.nn.softmax(logits)}


def _saved_model(path):
  module = _BrightnessModel()
  module.weight = tf.Variable(1.0)  # So it has variables/, as every Trainer export does.
  tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
  return str(path)


def _run_check(tmp_path, name, examples, production, block=0):
  report = drift_baseline.DriftReport()
  report.uri = str(tmp_path / name / "drift")
  os.makedirs(report.uri)
  executor = drift_check.DriftCheck.EXECUTOR_SPEC.executor_class()
  executor.Do({"examples": [examples], "statistics": [_statistics(tmp_path / name / "stats")],
               "schema": [_schema(tmp_path / name / "schema")], "production_model": [production]},
              {"drift_report": [report]}, {**LIMITS, "block_on_drift": block})
  return report


def _production(tmp_path, name, serving_dir):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / name / "production")
  os.makedirs(model.uri)
  ProductionModelExecutor().Do({}, {"model": [model]}, {"serving_directory": serving_dir})
  return model


def _push(tmp_path, name, model_dir, serving_dir, report):
  model, blessing, pushed = (standard_artifacts.Model(), standard_artifacts.ModelBlessing(),
                             standard_artifacts.PushedModel())
  model.uri = str(tmp_path / name / "model")
  shutil.copytree(model_dir, os.path.join(model.uri, "Format-Serving"))
  blessing.uri, pushed.uri = str(tmp_path / name / "blessing"), str(tmp_path / name / "pushed")
  blessing.set_int_custom_property("blessed", 1)
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=serving_dir))
  pusher.VersionedPusherExecutor().Do(
      {"model": [model], "model_blessing": [blessing], "drift": [report]},
      {"pushed_model": [pushed]}, {"push_destination": proto_utils.proto_to_json(destination)})
  return pushed


@pytest.fixture(scope="module")
def digits():
  return _digits()


@pytest.fixture(scope="module")
def plain_examples(digits, tmp_path_factory):
  """The digits' Examples, written once for the module (DriftCheck only reads its input)."""
  images, labels = digits
  return _examples(tmp_path_factory.mktemp("plain"), images, labels)


@pytest.fixture(scope="module")
def darker_examples(digits, tmp_path_factory):
  """The same digits at 0.8 of their brightness, written once for the module."""
  images, labels = digits
  return _examples(tmp_path_factory.mktemp("darker"), images, labels, darker=0.8)


def test_the_baseline_travels_with_the_pushed_model_and_drift_is_named(
    tmp_path, digits, plain_examples, darker_examples):
  _, labels = digits
  serving = str(tmp_path / "serving")
  first = _run_check(tmp_path, "first", plain_examples, _production(tmp_path, "first", serving))
  assert first.get_string_custom_property(drift_baseline.STATUS_KEY) == \
      drift_baseline.NO_PRODUCTION
  assert first.get_int_custom_property(drift_baseline.BLOCKS_PUSH_KEY) == 0
  assert first.split_names == "[\"train\"]"  # What a Kubeflow consumer needs of the type.
  result = drift_baseline.read_result(first.uri)
  assert result["comparisons"] == [] and result["moved"] == []

  pushed = _push(tmp_path, "first", _saved_model(tmp_path / "trained"), serving, first)
  version = pushed.get_string_custom_property("pushed_destination")
  kept = drift_baseline.baseline_dir(version)
  assert sorted(os.listdir(kept)) == sorted(drift_baseline.FILES)
  assert pusher.version_problem(version) is None  # The baseline is outside the fingerprint.
  info = drift_baseline.read_info(kept)
  assert info["train_examples"] == sum(1 for i in range(len(labels)) if i % 3)
  assert info["reference_examples"] == sum(1 for i in range(len(labels)) if i % 3 == 0)

  # The next runs find it where they find the model in production.
  production = _production(tmp_path, "second", serving)
  same = _run_check(tmp_path, "same", plain_examples, production)
  assert same.get_string_custom_property(drift_baseline.STATUS_KEY) == drift_baseline.NO_DRIFT
  darker = _run_check(tmp_path, "darker", darker_examples, production)
  result = drift_baseline.read_result(darker.uri)
  assert result["status"] == drift_baseline.DRIFT
  moved = {c["feature"] for c in result["comparisons"] if c["moved"]}
  assert {drift.BRIGHTNESS, drift.BBSD} <= moved and drift.LABEL not in moved
  assert darker.get_float_custom_property("brightness_distance") > 0.05
  assert darker.get_float_custom_property("bbsd_p_value") < 0.01
  assert any(sentence.startswith("brightness: Jensen-Shannon") for sentence in json.loads(
      darker.get_string_custom_property(drift_baseline.MOVED_KEY)))
  assert darker.get_int_custom_property(drift_baseline.BLOCKS_PUSH_KEY) == 0


def test_block_on_drift_makes_the_pusher_refuse_and_a_vanished_class_stops_the_run(
    tmp_path, digits, plain_examples, darker_examples):
  images, labels = digits
  serving = str(tmp_path / "serving")
  first = _run_check(tmp_path, "first", plain_examples, _production(tmp_path, "first", serving))
  _push(tmp_path, "first", _saved_model(tmp_path / "trained"), serving, first)
  production = _production(tmp_path, "second", serving)

  blocked = _run_check(tmp_path, "blocked", darker_examples, production, block=1)
  assert blocked.get_int_custom_property(drift_baseline.BLOCKS_PUSH_KEY) == 1
  refused = _push(tmp_path, "blocked", _saved_model(tmp_path / "other"), serving, blocked)
  assert refused.get_int_custom_property("pushed") == 0
  assert "brightness" in refused.get_string_custom_property(pusher.REFUSED_FOR_DRIFT_KEY)
  assert len(pusher.serving_versions(serving)) == 1

  unblocked = _run_check(tmp_path, "same", plain_examples, production, block=1)
  assert unblocked.get_int_custom_property(drift_baseline.BLOCKS_PUSH_KEY) == 0

  keep = labels != 7
  with pytest.raises(drift_check.ClassSetChanged, match=r"class\(es\) 7 of the data"):
    _run_check(tmp_path, "vanished", _examples(tmp_path / "d", images[keep], labels[keep]),
               production)


def test_a_production_model_pushed_without_a_baseline_passes(tmp_path, digits):
  images, labels = digits
  serving = str(tmp_path / "serving")
  no_drift_input = str(tmp_path / "model")
  _saved_model(no_drift_input)
  fingerprint = pusher.saved_model_fingerprint(no_drift_input)
  pusher.push_version(no_drift_input, serving, fingerprint)  # As pushes before the check did.
  report = _run_check(tmp_path, "run", _examples(tmp_path / "a", images[:200], labels[:200]),
                      _production(tmp_path, "run", serving))
  assert report.get_string_custom_property(drift_baseline.STATUS_KEY) == \
      drift_baseline.NO_BASELINE
  assert drift_baseline.holds_baseline(os.path.join(report.uri, drift_baseline.OUTPUT_DIR))


class _FailingModel(tf.Module):
  """A served model that cannot serve these examples: it reads a feature they lack."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(self, examples):
    parsed = tf.io.parse_example(examples, {"absent": tf.io.FixedLenFeature([], tf.float32)})
    return {"probabilities": tf.nn.softmax(tf.stack([parsed["absent"]] * 2, axis=1))}


def test_a_production_model_that_cannot_serve_the_examples_skips_bbsd_and_says_so(
    tmp_path, digits):
  images, labels = digits
  serving = str(tmp_path / "serving")
  first = _run_check(tmp_path, "first", _examples(tmp_path / "a", images[:300], labels[:300]),
                     _production(tmp_path, "first", serving))
  module = _FailingModel()
  module.weight = tf.Variable(1.0)
  tf.saved_model.save(module, str(tmp_path / "failing"),
                      signatures={"serving_default": module.serve})
  _push(tmp_path, "first", str(tmp_path / "failing"), serving, first)
  darker = _run_check(tmp_path, "darker",
                      _examples(tmp_path / "b", images[:300], labels[:300], darker=0.8),
                      _production(tmp_path, "second", serving))
  result = drift_baseline.read_result(darker.uri)
  assert "did not serve the examples" in result["bbsd_not_run"]
  moved = {c["feature"] for c in result["comparisons"] if c["moved"]}
  assert drift.BRIGHTNESS in moved and drift.BBSD not in {
      c["feature"] for c in result["comparisons"]}
