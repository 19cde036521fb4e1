"""AugMix in Transform on Beam: reproducible across runs and workers, absent from serving."""

import hashlib

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from test_support.graph_ops import augmix_or_random_ops, reachable_op_types
from test_support.tiny_config import TINY_NETWORK, plain_trainer
from test_support.transform_runs import raw_digit_examples, run_transform
from trainer_module.export import export_serving_model
from trainer_module.model import wide_resnet


def _options(seed=42, num_views=2):
  return plain_trainer(augmix=True, aug_count=num_views, seed=seed).transform_options()


IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
# Two Beam workers the input is partitioned between (threads: the same partitioning as worker
# processes, without a TensorFlow import per process).
TWO_WORKERS = ["--direct_running_mode=multi_threading", "--direct_num_workers=2"]


TRAIN, HELD_OUT = raw_digit_examples(40)[:32], raw_digit_examples(40)[32:]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
  """One Transform run as the component makes it: analysed on the train split, the held-out
  examples transformed with the result."""
  return run_transform(TRAIN, _options(), str(tmp_path_factory.mktemp("a")), IN_MEMORY,
                       eval_raw=HELD_OUT)


def test_views_are_bit_identical_across_beam_runs_and_worker_counts(reference_run, tmp_path):
  digests, _ = reference_run
  assert len(digests) == 40
  two_workers, _ = run_transform(TRAIN, _options(), str(tmp_path), TWO_WORKERS,
                                 eval_raw=HELD_OUT)
  assert two_workers == digests


def test_only_keys_of_the_analysed_train_split_get_views(reference_run):
  digests, _ = reference_run
  no_views = hashlib.sha256(b"").hexdigest()
  assert {digests[raw["key"]] for raw in HELD_OUT} == {no_views}
  assert no_views not in {digests[raw["key"]] for raw in TRAIN}


def test_views_differ_across_keys_and_seeds(reference_run, tmp_path):
  digests, _ = reference_run
  train_digests = [digests[raw["key"]] for raw in TRAIN]
  assert len(set(train_digests)) == len(TRAIN)
  other_seed, _ = run_transform(TRAIN, _options(seed=7), str(tmp_path), IN_MEMORY)
  assert all(other_seed[raw["key"]] != digests[raw["key"]] for raw in TRAIN)


def test_serving_graph_has_no_augmix_or_random_op_and_is_deterministic(reference_run, tmp_path):
  _, transform_dir = reference_run
  tft_output = tft.TFTransformOutput(transform_dir)
  # Control: the transform graph itself does hold AugMix, so its absence below means pruning.
  full_transform = tf.saved_model.load(tft_output.transform_savedmodel_dir)
  transform_ops = set()
  for function in full_transform.signatures.values():
    transform_ops |= reachable_op_types(function)
  assert {"ImageProjectiveTransformV3", "StringToHashBucketFast"} <= transform_ops

  config = plain_trainer(**TINY_NETWORK)
  export_dir = str(tmp_path / "serving")
  export_serving_model(wide_resnet(config), tft_output, export_dir)
  serve = tf.saved_model.load(export_dir).signatures["serving_default"]
  serving_ops = reachable_op_types(serve)
  assert {"Conv2D", "DecodeImage"} <= serving_ops  # Control: the walk reaches model and TFT.
  assert not augmix_or_random_ops(serving_ops)

  examples = tf.constant([_serialized(raw) for raw in raw_digit_examples(8)])
  first, second = serve(examples=examples), serve(examples=examples)
  np.testing.assert_array_equal(first["probabilities"].numpy(), second["probabilities"].numpy())


def _serialized(raw):
  feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[raw["image"]]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
