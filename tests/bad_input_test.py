"""Bad examples stop the pipeline before Transform and Trainer, name the problem, push nothing."""
import gzip
import os
import re

import pytest

from components import image_sources
from components.splits import SPLITS
from pipeline.config import from_flags
from local_runner.run_record import RunRecord
from tests.conftest import run_pipeline
from test_support.tfrecord_inputs import png_of_shape, write_digits_tfrecord_dir

pytestmark = pytest.mark.e2e  # Each starts a local pipeline run that stops at the bad input.


def _not_a_png(example):
  example.features.feature["image"].bytes_list.value[:] = [b"this is not a png"]


def _wrong_shape(example):
  example.features.feature["image"].bytes_list.value[:] = [png_of_shape((28, 28, 3))]


def _nth_key(split, n):
  return list(image_sources.digits_records(split, 0.15, 0.15))[n][0]


def _duplicate_key(example):  # Takes the key of train example 3.
  example.features.feature["key"].bytes_list.value[:] = [_nth_key("train", 3).encode()]


def _key_of_a_test_example(example):
  example.features.feature["key"].bytes_list.value[:] = [_nth_key("test", 0).encode()]


def _label_out_of_range(example):
  example.features.feature["label"].int64_list.value[:] = [10]


def _missing_label(example):
  del example.features.feature["label"]


_TRAIN_FILE = "{data}/train/digits.tfrecord"  # The user's own file, not an ExampleGen shard.
# Train example i gets the key bad-i, then its edit: one of each kind of bad example.
BAD_EXAMPLES = {7: _not_a_png, 8: _wrong_shape, 9: _duplicate_key, 10: _key_of_a_test_example,
                11: _label_out_of_range, 12: _missing_label}
EXPECTED_PROBLEMS = [
    f"split 'train', example key 'bad-7' (file {_TRAIN_FILE}): 'image' not a PNG image",
    f"split 'train', example key 'bad-8' (file {_TRAIN_FILE}): 'image' declares 28x28 pixels "
    "(expected an 8-bit RGB PNG of 32x32 pixels)",
    f"split 'train', example key '{_nth_key('train', 3)}' (file {_TRAIN_FILE}): key appears 2 "
    "times in the split; keys must be unique",
    f"split 'test', example key '{_nth_key('test', 0)}' (file {{data}}/test/digits.tfrecord, "
    f"{_TRAIN_FILE}): key is in splits test, train; a key must be in one split only",
    f"split 'train', example key 'bad-11' (file {_TRAIN_FILE}): feature 'label' is 10, outside "
    "the schema's domain [0, 9]",
    f"split 'train', example key 'bad-12' (file {_TRAIN_FILE}): feature 'label' is missing",
    # The statistics see the label's two anomalies together.
    "schema anomaly: split 'train', feature 'label': Multiple errors: ",
    "The feature was present in fewer examples than expected",
    "Unexpectedly large value: 10.",
    # And the split is too small for the tiny preset's batch: the run names that too.
    "split 'train' has 60 examples, fewer than 64",
]


def test_every_bad_example_is_named_in_one_run_that_stops_before_training(tmp_path,
                                                                          pipeline_runner):
  """One of each kind of bad example in the user's files: the run names them all (the user
  fixes them in one go), with their split, key and file, and stops at the gate."""
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=60,
                                       corrupt=BAD_EXAMPLES)
  flags = [f"--output_dir={tmp_path / 'out'}", "--dataset=tfrecord", f"--tfrecord_dir={data_dir}",
           "--beam_running_mode=in_memory", "--config=tiny",
           "--train_steps=1"]
  result = pipeline_runner(*flags)
  assert result.returncode == 1
  assert "Bad input data" in result.stderr
  for problem in EXPECTED_PROBLEMS:
    assert problem.format(data=data_dir) in result.stderr, (problem, result.stderr[-3000:])
  assert "more bad examples" not in result.stderr

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
  for split in SPLITS:
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
