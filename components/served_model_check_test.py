"""The served-model check on small SavedModels: a candidate that serves raw tf.Examples
correctly passes; a broken serving signature or non-normalised probabilities are refused, and
TFX's Pusher (ours) then publishes nothing."""
import json
import os

import pytest
import tensorflow as tf
from tensorflow_model_analysis.proto import metrics_for_slice_pb2
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import proto_utils

from components import evaluation_set, served_model_check, serving_client
from components.calibration_metrics import ACCURACY_NAME
from components.pusher import VersionedPusherExecutor
from trainer_module.features import (CLASS_IDS_KEY, LABEL_KEY, PROBABILITIES_KEY)

NUM_CLASSES = 3
LABELS = [0, 1, 2, 1, 0, 2, 2, 1]


class _Server(tf.Module):
  """Serves the label back as its class (accuracy 1) with one-hot probabilities times `scale`."""

  def __init__(self, scale: float):
    super().__init__()
    self.scale = scale

  def serve(self, serialized):
    labels = tf.io.parse_example(serialized, {LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)})[
        LABEL_KEY]
    return {CLASS_IDS_KEY: labels,
            PROBABILITIES_KEY: tf.one_hot(labels, NUM_CLASSES) * self.scale}


def _export(path: str, input_key: str, scale: float = 1.0) -> str:
  module = _Server(scale)
  signature = tf.function(module.serve).get_concrete_function(
      tf.TensorSpec([None], tf.string, name=input_key))
  tf.saved_model.save(module, os.path.join(path, "Format-Serving"),
                      signatures={"serving_default": signature})
  model = standard_artifacts.Model()
  model.uri = path
  return model


def _examples(path: str, labels=LABELS):
  os.makedirs(os.path.join(path, "Split-test"))
  with tf.io.TFRecordWriter(os.path.join(path, "Split-test", "data.gz"), "GZIP") as writer:
    for label in labels:
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}))
                   .SerializeToString())
  examples = standard_artifacts.Examples()
  examples.uri = path
  examples.split_names = artifact_utils.encode_split_names(["train", "eval", "test"])
  return examples


def _evaluation(path: str, test_accuracy: float):
  """A TFMA output holding the calibrated accuracy of the eval_set=test slice."""
  os.makedirs(path)
  metrics = metrics_for_slice_pb2.MetricsForSlice()
  key = metrics.slice_key.single_slice_keys.add(column=evaluation_set.EVAL_SET_KEY)
  key.bytes_value = evaluation_set.TEST.encode()
  entry = metrics.metric_keys_and_values.add()
  entry.key.name = ACCURACY_NAME
  entry.key.output_name = PROBABILITIES_KEY
  entry.value.double_value.value = test_accuracy
  with tf.io.TFRecordWriter(os.path.join(path, "metrics-00000-of-00001.tfrecord")) as writer:
    writer.write(metrics.SerializeToString())
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = path
  return evaluation


def _check(tmp_path, model, evaluator_accuracy=1.0, labels=LABELS):
  blessing = standard_artifacts.InfraBlessing()
  blessing.uri = str(tmp_path / "infra_blessing")
  executor = served_model_check.ServedModelCheck.EXECUTOR_SPEC.executor_class()
  executor.Do({"model": [model], "examples": [_examples(str(tmp_path / "examples"), labels)],
               "evaluation": [_evaluation(str(tmp_path / "evaluation"), evaluator_accuracy)]},
              {"infra_blessing": [blessing]},
              {"accuracy_tolerance": served_model_check.ACCURACY_TOLERANCE})
  return blessing, served_model_check.read_result(blessing.uri)


@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
  """The candidate that serves raw examples correctly, exported once for the module."""
  return _export(str(tmp_path_factory.mktemp("good_model")), "examples")


@pytest.fixture
def scored_in_this_process(monkeypatch):
  """The check with serving_client's scores computed in the test's process (TensorFlow is
  loaded here already) instead of a fresh interpreter's: for the checks of what the scores
  mean. The child process itself, its JSON line and its failure, is checked by the tests of a
  passing candidate and of a wrong input key, which keep it."""
  monkeypatch.setattr(served_model_check, "served_scores", serving_client.score)


def test_a_candidate_that_serves_raw_examples_passes(tmp_path, good_model):
  blessing, result = _check(tmp_path, good_model)
  assert blessing.get_int_custom_property("blessed") == 1
  assert result["passed"] and result["problems"] == []
  assert (result["split"], result["accuracy"], result["examples"]) == ("test", 1.0, len(LABELS))
  assert os.path.exists(os.path.join(blessing.uri, "INFRA_BLESSED"))


def test_accuracy_disagreeing_with_the_evaluator_is_refused(tmp_path, good_model,
                                                            scored_in_this_process):
  blessing, result = _check(tmp_path, good_model, evaluator_accuracy=0.9)
  assert blessing.get_int_custom_property("blessed") == 0
  assert result["problems"] == ["served accuracy 1.0000 differs from the Evaluator's 0.9000 on "
                                "the same split by more than 0.01"]


@pytest.mark.parametrize("served,evaluated,refused", [
    (0.75, 0.5, True), (0.5, 0.75, True),  # Served better, served worse: beyond the tolerance.
    (0.75, 0.625, False), (0.625, 0.75, False),  # Exactly the tolerance either way: served.
    (0.5, 0.5, False)])
def test_the_accuracy_tolerance_holds_in_both_directions(served, evaluated, refused):
  scores = {"accuracy": served, "correct": 1, "examples": 8, "non_finite": 0,
            "not_normalised": 0}
  found = served_model_check.problems(scores, evaluated, 0.125, "test")
  assert found == ([f"served accuracy {served:.4f} differs from the Evaluator's {evaluated:.4f} "
                    "on the same split by more than 0.125"] if refused else [])


def test_non_normalised_probabilities_are_refused(tmp_path, scored_in_this_process):
  _, result = _check(tmp_path, _export(str(tmp_path / "model"), "examples", scale=2.0))
  assert not result["passed"]
  assert result["problems"] == [f"{len(LABELS)} of {len(LABELS)} examples got probabilities "
                                "that do not sum to 1 (within 0.001)"]


def test_a_candidate_exported_with_a_wrong_input_key_is_refused_before_anything_is_pushed(
    tmp_path):
  model = _export(str(tmp_path / "model"), "images")  # Serving clients send `examples`.
  infra_blessing, result = _check(tmp_path, model)
  assert infra_blessing.get_int_custom_property("blessed") == 0
  (problem,) = result["problems"]
  assert problem.startswith("the `serving_default` signature failed on serialized tf.Examples:")
  assert "takes ['images'], not the one input 'examples'" in problem
  assert os.path.exists(os.path.join(infra_blessing.uri, "INFRA_NOT_BLESSED"))

  # The gate blessed it; the Pusher still publishes nothing.
  model_blessing = standard_artifacts.ModelBlessing()
  model_blessing.uri = str(tmp_path / "model_blessing")
  model_blessing.set_int_custom_property("blessed", 1)
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / "pushed")
  serving = tmp_path / "serving"
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=str(serving)))
  VersionedPusherExecutor().Do(
      {"model": [model], "model_blessing": [model_blessing], "infra_blessing": [infra_blessing]},
      {"pushed_model": [pushed]}, {"push_destination": proto_utils.proto_to_json(destination)})
  assert pushed.get_int_custom_property("pushed") == 0
  assert not serving.exists() or not os.listdir(serving)


def test_an_empty_split_is_named_and_refused_not_a_division_by_zero(tmp_path, good_model,
                                                                   scored_in_this_process):
  blessing, result = _check(tmp_path, good_model, labels=[])
  assert blessing.get_int_custom_property("blessed") == 0
  assert result["problems"] == ["the test split holds no examples: the candidate could not be "
                                "served any, so it is not checked as a serving client sees it"]
  assert (result["accuracy"], result["correct"], result["examples"]) == (None, 0, 0)


@pytest.mark.parametrize("names,split", [(["train", "eval", "test"], "test"),
                                         (["train", "eval"], "eval")])
def test_the_held_out_test_split_is_checked_when_there_is_one(names, split):
  assert served_model_check.checked_split(names) == split


def test_problems_name_non_finite_probabilities_and_a_missing_evaluator_accuracy():
  scores = {"accuracy": 0.5, "correct": 1, "examples": 2, "non_finite": 1, "not_normalised": 0}
  assert served_model_check.problems(scores, None, 0.01, "test") == [
      "1 of 2 examples got probabilities that are not finite",
      "the Evaluator recorded no accuracy on this split to compare with"]
  assert json.dumps(served_model_check.problems({"error": "boom"}, 0.5, 0.01, "test")) == \
      json.dumps(["the `serving_default` signature failed on serialized tf.Examples: boom"])



@pytest.mark.parametrize("window", [None, "20261130,20261201"])
def test_the_blessing_names_the_span_version_and_window_of_the_examples(window):
  from tfx.types import standard_artifacts
  from components import pusher
  examples, blessing = standard_artifacts.Examples(), standard_artifacts.InfraBlessing()
  examples.span, examples.version = 20261201, 3  # As the artifact's properties.
  if window:  # As ExampleGen's driver writes them: custom properties, which win.
    examples.set_int_custom_property("span", 20261202)
    examples.set_string_custom_property("input_fingerprint", "f")
    examples.set_string_custom_property(pusher.TRAIN_WINDOW_KEY, window)
  served_model_check.record_training_data(examples, blessing)
  assert pusher.training_data_of(blessing) == (
      {"span": 20261202, "version": 3, "train_window": window, "input_fingerprint": "f"}
      if window else {"span": 20261201, "version": 3})
