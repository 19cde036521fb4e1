"""Every Beam step of the pipeline submitted over Beam's portable Job API to a job server and an
external SDK worker pool (test_support/beam_servers.py), as to a Flink or Spark cluster: the work
done in the pool's workers gives the DirectRunner's outputs. (On object storage, the compiled
kfp spec's run in tests/kfp_harness_test.py sends its Beam steps to a pool.)"""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_metadata.proto.v0 import statistics_pb2

from components import tfma_results
from pipeline.config import from_flags
from local_runner.run_record import RunRecord
from test_support.beam_servers import PortableBeam
from test_support.tiny_config import SMALL_MODEL
from tests.conftest import run_pipeline

pytestmark = pytest.mark.e2e  # Pipeline runs, a Beam job server and a worker pool.

# Op determinism: both runs train bit-identical models from identical transformed examples, so
# their evaluations can be compared metric by metric. One AugMix view set and no robustness set
# keep the three runs of this module short; the Beam steps run the same code either way.
FLAGS = [*SMALL_MODEL, "--op_determinism=true", "--augmix_view_sets=1", "--corruptions="]
# What the local run stages: its requirements file, and the list of the submitting
# environment's packages Beam always adds. No sdist of TFX (tfx/utils/dependency_utils.py).
LOCAL_STAGED = ["requirements.txt", "submission_environment_dependencies.txt"]


@pytest.fixture(scope="module")
def direct_run(tmp_path_factory):
  """The reference: the same run on the default engine, Beam's DirectRunner."""
  flags = [f"--output_dir={tmp_path_factory.mktemp('direct')}", *FLAGS]
  result = run_pipeline(*flags)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return RunRecord(from_flags(flags))


def test_every_beam_step_runs_in_the_pool_and_gives_the_direct_runners_outputs(direct_run,
                                                                              tmp_path):
  flags = [f"--output_dir={tmp_path}", *FLAGS]
  with PortableBeam() as beam:
    result = run_pipeline(*flags, *beam.beam_flags())
    workers = beam.worker_records()
    steps_not_in_the_pool = beam.steps_not_run_here()
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert "pushed model:    " in result.stdout and "nothing pushed" not in result.stdout
  run = RunRecord(from_flags(flags))

  # Each step's bundles ran in processes the worker pool started, with the run's options.
  assert steps_not_in_the_pool == []
  for records in workers.values():
    assert records[0]["options"]["job_endpoint"] == beam.job_endpoint
    assert records[0]["staged"] == LOCAL_STAGED

  assert _records(run, "examples") == _records(direct_run, "examples")
  _assert_close(_statistics(run), _statistics(direct_run))
  assert _records(run, "transformed_examples") == _records(direct_run, "transformed_examples")
  metrics = _metrics(run)
  reference = _metrics(direct_run)
  assert metrics.keys() == reference.keys()  # Every slice.
  assert {(("eval_set", "eval"),), (("eval_set", "test"),)} <= metrics.keys()
  for slice_, values in reference.items():
    assert values.keys() == metrics[slice_].keys(), slice_
    for key, value in values.items():
      np.testing.assert_allclose(metrics[slice_][key], value, rtol=1e-5, atol=1e-7,
                                 err_msg=f"{slice_} {key}")
  assert run.latest_output("blessing").custom_properties["blessed"].int_value == 1


def _split_files(run, output):
  uri = run.latest_output(output).uri
  return {os.path.basename(split): sorted(glob.glob(os.path.join(split, "*")))
          for split in glob.glob(os.path.join(uri, "Split-*"))}


def _records(run, output):
  """{split: the sorted examples}, each serialized deterministically (an Example's features are
  a map, whose serialized order differs between processes)."""
  return {split: sorted(tf.train.Example.FromString(record.numpy()).SerializeToString(
      deterministic=True) for record in tf.data.TFRecordDataset(files, compression_type="GZIP"))
          for split, files in _split_files(run, output).items()}


def _statistics(run):
  statistics = {}
  for split, files in _split_files(run, "statistics").items():
    proto = statistics_pb2.DatasetFeatureStatisticsList()
    with open(next(f for f in files if f.endswith("FeatureStats.pb")), "rb") as f:
      proto.ParseFromString(f.read())
    statistics[split] = json_format.MessageToDict(proto)
  return statistics


def _assert_close(actual, expected, path="statistics"):
  """Equal structures; floats within a rounding error (sums in another order)."""
  if isinstance(expected, dict):
    assert isinstance(actual, dict) and actual.keys() == expected.keys(), path
    for key in expected:
      _assert_close(actual[key], expected[key], f"{path}.{key}")
  elif isinstance(expected, list):
    assert isinstance(actual, list) and len(actual) == len(expected), path
    for i, (a, e) in enumerate(zip(actual, expected)):
      _assert_close(a, e, f"{path}[{i}]")
  elif isinstance(expected, float):
    assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), path
  else:
    assert actual == expected, path


def _metrics(run):
  return tfma_results.load_metrics(run.latest_output("evaluation").uri)
