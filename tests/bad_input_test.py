"""Bad examples stop the pipeline before Transform and Trainer, name the problem, push nothing."""
import gzip
import os
import re

import pytest

from components import image_sources
from pipeline.config import from_flags
from reporting.run_record import RunRecord
from tests.conftest import run_pipeline
from testing.tfrecord_inputs import png_of_shape, write_digits_tfrecord_dir

pytestmark = pytest.mark.e2e  # Each starts a local pipeline run that stops at the bad input.


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


_TRAIN_FILE = "{data}/train/digits.tfrecord"  # The user's own file, not an ExampleGen shard.


@pytest.mark.parametrize("corrupt, expected", [
    (_not_a_png, f"split 'train', example key 'bad-example' (file {_TRAIN_FILE}): 'image' not a "
     "PNG image"),
    (_wrong_shape, "'image' declares 28x28 pixels (expected an 8-bit RGB PNG of 32x32 pixels)"),
    (_duplicate_key, f"split 'train', example key '{_nth_key('train', 6)}' (file {_TRAIN_FILE}): "
     "key appears 2 times in the split; keys must be unique"),
    (_key_of_a_test_example, f"split 'test', example key '{_nth_key('test', 0)}' (file "
     f"{{data}}/test/digits.tfrecord, {_TRAIN_FILE}): key is in splits test, train; a key must "
     "be in one split only"),
    (_label_out_of_range, f"split 'train', example key 'bad-example' (file {_TRAIN_FILE}): "
     "feature 'label' is 10, outside the schema's domain [0, 9]"),
    (_missing_label, f"split 'train', example key 'bad-example' (file {_TRAIN_FILE}): feature "
     "'label' is missing"),
], ids=["not-a-png", "wrong-shape", "duplicate-key", "key-in-two-splits", "label-out-of-range",
        "missing-feature"])
def test_bad_example_stops_the_pipeline_before_training(tmp_path, pipeline_runner, corrupt,
                                                         expected):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60,
                                       corrupt=corrupt)
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--config=tiny",
           "--train_steps=1"]
  result = pipeline_runner(*flags)
  assert result.returncode == 1
  assert "Bad input data" in result.stderr
  assert expected.format(data=data_dir) in result.stderr, result.stderr[-3000:]
  if corrupt is _label_out_of_range:
    assert "split 'train', feature 'label': Out-of-range values" in result.stderr
  if corrupt is _missing_label:
    assert "present in fewer examples than expected" in result.stderr

  config = from_flags(flags)
  states = RunRecord(config).states
  assert states["ValidationGate"] == "FAILED"
  assert not {"Transform", "Trainer", "Evaluator", "Pusher"} & set(states)
  assert not os.path.exists(config.runner.serving_model_dir)


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


@pytest.fixture(scope="module")
def truncated_gzip_run(tmp_path_factory):
  """A run on gzipped inputs, one cut in half, with Beam's worker processes (whose tracebacks
  went to the console): (damaged file, completed process, run log text)."""
  tmp_path = tmp_path_factory.mktemp("truncated_gzip")
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60)
  for split in image_sources.SPLITS:
    path = os.path.join(data_dir, split, "digits.tfrecord")
    with open(path, "rb") as source, gzip.open(path + ".gz", "wb") as target:
      target.write(source.read())
    os.remove(path)
  damaged = os.path.join(data_dir, "eval", "digits.tfrecord.gz")
  with open(damaged, "r+b") as f:
    f.truncate(os.path.getsize(damaged) // 2)
  result = run_pipeline(f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord",
                        f"--tfrecord_dir={data_dir}", "--beam_running_mode=multi_processing",
                        "--beam_workers=2")
  log_path = re.search(r"Full log: (\S+)", result.stderr).group(1)
  with open(log_path) as f:
    return damaged, result, f.read()


def test_a_truncated_gzip_input_gives_one_message_and_its_traceback_goes_to_the_log(
    truncated_gzip_run):
  damaged, result, log_text = truncated_gzip_run
  assert result.returncode == 1
  assert re.search(rf"- {re.escape(damaged)}: truncated record at byte offset \d+",
                   result.stderr), result.stderr[-3000:]
  assert "Traceback" not in result.stderr + result.stdout, (result.stderr + result.stdout)[-3000:]
  assert len(result.stderr.splitlines()) < 6
  assert "Not a valid TFRecord" in log_text  # Beam's worker traceback, kept in the log.


def test_the_run_log_holds_the_failure_and_its_traceback(truncated_gzip_run):
  _, _, log_text = truncated_gzip_run
  failure = log_text.find("ERROR pipeline: The run failed: ")
  assert failure >= 0, log_text[-3000:]
  # The runner's own traceback: from the frame that ran the pipeline down to the exception.
  assert re.search(r'Traceback \(most recent call last\):\n  File ".*/local_runner/runner\.py", '
                   r"line \d+, in _run_locked\n", log_text[failure:]), log_text[failure:][-3000:]


def test_an_empty_split_of_a_query_based_source_stops_at_the_gate_naming_it(tmp_path,
                                                                            pipeline_runner):
  # No digits key hashes below 1e-5: the source gives the eval split nothing.
  flags = [f"--output_dir={tmp_path / 'out'}", "--eval_fraction=0.00001",
           "--beam_running_mode=in_memory", "--config=tiny",
           "--train_steps=1", "--corruptions="]
  result = pipeline_runner(*flags)
  assert result.returncode == 1
  assert re.search(r"split 'eval' has no examples: every file in \S+/ImageDatasetExampleGen/"
                   r"examples/\d+/Split-eval is empty", result.stderr), result.stderr[-3000:]
  states = RunRecord(from_flags(flags)).states
  assert states["ValidationGate"] == "FAILED"
  assert not {"Transform", "Trainer", "Evaluator", "Pusher"} & set(states)
