"""Bad examples stop the pipeline before Transform and Trainer, name the problem, push nothing."""
import os
import re

import pytest

from components import image_sources
from pipeline.config import from_flags
from pipeline.run_record import RunRecord
from testing.tfrecord_inputs import png_of_shape, write_digits_tfrecord_dir


def _not_a_png(example):
  example.features.feature["image"].bytes_list.value[:] = [b"this is not a png"]


def _wrong_shape(example):
  example.features.feature["image"].bytes_list.value[:] = [png_of_shape((28, 28, 3))]


def _nth_key(split, n):
  return list(image_sources.digits_records(split, 0.15, 0.15))[n][0]


def _duplicate_key(example):  # Example 7 of train takes the key of example 6.
  example.features.feature["key"].bytes_list.value[:] = [_nth_key("train", 6).encode()]


def _key_of_a_test_example(example):
  example.features.feature["key"].bytes_list.value[:] = [_nth_key("test", 0).encode()]


def _label_out_of_range(example):
  example.features.feature["label"].int64_list.value[:] = [10]


def _missing_label(example):
  del example.features.feature["label"]


@pytest.mark.parametrize("corrupt, expected", [
    (_not_a_png, "split 'train', example key 'bad-example' (file "),
    (_wrong_shape, "'image' declares 28x28 pixels (expected an 8-bit RGB PNG of 32x32 pixels)"),
    (_duplicate_key, f"split 'train', example key '{_nth_key('train', 6)}' (file "),
    (_key_of_a_test_example, f"split 'test', example key '{_nth_key('test', 0)}' (file "),
    (_label_out_of_range, "split 'train', feature 'label': Out-of-range values"),
    (_missing_label, "split 'train', feature 'label': "),
], ids=["not-a-png", "wrong-shape", "duplicate-key", "key-in-two-splits", "label-out-of-range",
        "missing-feature"])
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
  if corrupt is _duplicate_key:
    assert "key appears 2 times in the split; keys must be unique" in result.stderr
  if corrupt is _key_of_a_test_example:
    assert "key is in splits test, train; a key must be in one split only" in result.stderr

  config = from_flags(flags)
  states = RunRecord(config).states
  assert states["ValidationGate"] == "FAILED"
  assert not {"Transform", "Trainer", "Evaluator", "Pusher"} & set(states)
  assert not os.path.exists(config.serving_model_dir)


def test_a_truncated_input_tfrecord_is_named_with_the_byte_offset(tmp_path, pipeline_runner):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60)
  damaged = os.path.join(data_dir, "eval", "digits.tfrecord")
  with open(damaged, "rb") as f:
    data = f.read()
  with open(damaged, "wb") as f:
    f.write(data[:-100])  # Cut inside the last record.
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory"]
  result = pipeline_runner(*flags)
  assert result.returncode == 1
  assert "Corrupted input TFRecord file(s)" in result.stderr, result.stderr[-3000:]
  assert re.search(rf"- {re.escape(damaged)}: truncated record at byte offset \d+ \(after 59 "
                   r"good records\)", result.stderr)
  assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) < 10
  assert RunRecord(from_flags(flags)).states["ImportExampleGen"] == "FAILED"
