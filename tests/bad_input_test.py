"""Bad examples stop the pipeline before Transform and Trainer, name the problem, push nothing."""
import os

import pytest

from pipeline.config import from_flags
from pipeline.report import RunRecord
from tests.tfrecord_inputs import png_of_shape, write_digits_tfrecord_dir


def _not_a_png(example):
  example.features.feature["image"].bytes_list.value[:] = [b"this is not a png"]


def _wrong_shape(example):
  example.features.feature["image"].bytes_list.value[:] = [png_of_shape((28, 28, 3))]


def _label_out_of_range(example):
  example.features.feature["label"].int64_list.value[:] = [10]


def _missing_label(example):
  del example.features.feature["label"]


@pytest.mark.parametrize("corrupt, expected", [
    (_not_a_png, "split 'train', example key 'bad-example' (file "),
    (_wrong_shape, "'image' has shape (28, 28, 3), expected (32, 32, 3)"),
    (_label_out_of_range, "split 'train', feature 'label': Out-of-range values"),
    (_missing_label, "split 'train', feature 'label': "),
], ids=["not-a-png", "wrong-shape", "label-out-of-range", "missing-feature"])
def test_bad_example_stops_the_pipeline_before_training(tmp_path, pipeline_runner, corrupt,
                                                         expected):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60,
                                       corrupt=corrupt)
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--depth=10", "--width_multiplier=1",
           "--train_steps=1"]
  result = pipeline_runner(*flags)
  assert result.returncode == 1
  assert "Bad input data" in result.stderr
  assert expected in result.stderr, result.stderr[-3000:]
  if corrupt is _missing_label:
    assert "present in fewer examples than expected" in result.stderr

  config = from_flags(flags)
  states = RunRecord(config).states
  assert states["ValidationGate"] == "FAILED"
  assert not {"Transform", "Trainer", "Evaluator", "Pusher"} & set(states)
  assert not os.path.exists(config.serving_model_dir)
