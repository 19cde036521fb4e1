"""The whole pipeline on a reduced config: trains, evaluates, pushes a model that serves."""
import json
import os
import subprocess
import sys

import tensorflow as tf

from pipeline.config import from_flags
from pipeline.report import RunRecord
from tests.graph_ops import augmix_or_random_ops, reachable_op_types
from tests.tfrecord_inputs import write_digits_tfrecord_dir

# A WRN-10-1 for a few epochs: enough to learn digits, fast enough for CI.
SMALL_MODEL = ["--depth=10", "--width_multiplier=1", "--train_epochs=6",
               "--lr_decay_epochs=120,160", "--min_eval_accuracy=0.5"]
PIPELINE_COMPONENTS = {"ImageDatasetExampleGen", "StatisticsGen", "ImportSchemaGen",
                       "ExampleValidator", "ValidationGate", "Transform", "Trainer",
                       "Evaluator", "Pusher"}


def _versions(serving_dir):
  return sorted(os.listdir(serving_dir)) if os.path.isdir(serving_dir) else []


def _score(model_dir, examples_glob):
  result = subprocess.run([sys.executable, "-m", "pipeline.score_pushed_model", model_dir,
                           examples_glob], capture_output=True, text=True, check=True)
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_digits_pipeline_pushes_a_model_that_serves_and_a_rerun_reuses_the_cache(
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
  versions = _versions(config.serving_model_dir)
  assert len(versions) == 1 and versions[0].isdigit()
  assert f"pushed model:    {os.path.join(config.serving_model_dir, versions[0])}" in first.stdout

  # The pushed model, in a fresh process, on raw serialized tf.Examples of the test split.
  examples = run.latest_output("examples")
  scored = _score(os.path.join(config.serving_model_dir, versions[0]),
                  os.path.join(examples.uri, "Split-test", "*"))
  assert scored["examples"] > 200
  assert scored["accuracy"] > 0.6

  # Unchanged rerun: data, Transform and training are reused. The Evaluator now has a blessed
  # baseline (the same model) so it runs once more, and Pusher sees the model already serving.
  second = pipeline_runner(*flags)
  assert second.returncode == 0, second.stderr[-3000:]
  rerun = RunRecord(config)
  upstream = PIPELINE_COMPONENTS - {"Evaluator", "Pusher"}
  assert {rerun.states[c] for c in upstream} == {"CACHED"}
  assert "the blessed model already serves as" in second.stdout
  assert _versions(config.serving_model_dir) == versions, "the serving model is not pushed twice"

  # From then on, an unchanged run recomputes nothing.
  third = pipeline_runner(*flags)
  assert third.returncode == 0, third.stderr[-3000:]
  assert {RunRecord(config).states[c] for c in PIPELINE_COMPONENTS} == {"CACHED"}
  assert _versions(config.serving_model_dir) == versions


def test_tfrecord_input_with_augmix_trains_on_views_and_serves_without_them(tmp_path,
                                                                          pipeline_runner):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"))
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--augmix=true", "--aug_count=2", *SMALL_MODEL]
  result = pipeline_runner(*flags)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert "2 AugMix view(s) per image with JSD" in result.stdout
  config = from_flags(flags)
  run = RunRecord(config)
  assert run.states["ImportExampleGen"] == "COMPLETE"
  assert run.states["Pusher"] == "COMPLETE"
  assert "test accuracy:" in result.stdout

  transformed = tf.data.TFRecordDataset(
      tf.io.gfile.glob(os.path.join(run.latest_output("transformed_examples").uri,
                                    "Split-train", "*")), compression_type="GZIP")
  example = tf.train.Example.FromString(next(iter(transformed)).numpy())
  assert len(example.features.feature["augmix_views"].float_list.value) == 2 * 32 * 32 * 3

  version = _versions(config.serving_model_dir)[0]
  serve = tf.saved_model.load(os.path.join(config.serving_model_dir, version)).signatures[
      "serving_default"]
  serving_ops = reachable_op_types(serve)
  assert "Conv2D" in serving_ops
  assert not augmix_or_random_ops(serving_ops)
