"""AugMix in Transform on Beam: reproducible across runs and workers, absent from serving."""
import hashlib
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils

from components.image_sources import digits_to_images, encode_png
from tests.graph_ops import augmix_or_random_ops, reachable_op_types
from trainer_module import preprocessing
from trainer_module.config import TrainerConfig
from trainer_module.export import export_serving_model
from trainer_module.model import wide_resnet

RAW_SPEC = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "key": tf.io.FixedLenFeature([], tf.string)}


def _raw_examples(count=40):
  from sklearn.datasets import load_digits
  images = digits_to_images(load_digits().images[:count])
  return [{"image": encode_png(image), "label": i % 10, "key": f"digits-{i:04d}"}
          for i, image in enumerate(images)]


def _run_transform(raw, options, output_dir, beam_args):
  """Analyze + transform `raw` with Beam; returns {key: sha256 of the views} and the tft dir."""
  config = {"transform": options}

  def with_key(inputs):  # Carries the key through so outputs can be matched across runs.
    return {**preprocessing.preprocessing_fn(inputs, config), "key": inputs["key"]}

  metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(RAW_SPEC))
  transform_dir = os.path.join(output_dir, "transform_fn")
  records = os.path.join(output_dir, "transformed")
  with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
    with tft_beam.Context(temp_dir=os.path.join(output_dir, "tmp"),
                          force_tf_compat_v1=preprocessing.FORCE_TF_COMPAT_V1):
      data = pipeline | beam.Create(raw, reshuffle=False)
      (transformed, transformed_metadata), transform_fn = (
          (data, metadata) | tft_beam.AnalyzeAndTransformDataset(with_key))
      _ = transformed | beam.io.WriteToTFRecord(
          records, coder=tft.coders.ExampleProtoCoder(transformed_metadata.schema))
      _ = transform_fn | tft_beam.WriteTransformFn(transform_dir)
  # TFX's Transform also records the raw schema, which the serving signature parses with.
  metadata_io.write_metadata(
      metadata, os.path.join(transform_dir, tft.TFTransformOutput.RAW_METADATA_DIR))
  spec = tft.TFTransformOutput(transform_dir).transformed_feature_spec()
  digests = {}
  for record in tf.data.TFRecordDataset(tf.io.gfile.glob(records + "*")):
    features = tf.io.parse_single_example(record, spec)
    digests[features["key"].numpy().decode()] = hashlib.sha256(
        features["augmix_views"].numpy().tobytes()).hexdigest()
  return digests, transform_dir


def _options(seed=42, num_views=2):
  return TrainerConfig(augmix=True, aug_count=num_views, seed=seed).transform_options()


IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_PROCESSES = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
  return _run_transform(_raw_examples(), _options(), str(tmp_path_factory.mktemp("a")), IN_MEMORY)


def test_views_are_bit_identical_across_beam_runs_and_worker_counts(reference_run, tmp_path):
  digests, _ = reference_run
  assert len(digests) == 40
  again, _ = _run_transform(_raw_examples(), _options(), str(tmp_path / "b"), IN_MEMORY)
  two_workers, _ = _run_transform(_raw_examples(), _options(), str(tmp_path / "c"),
                                  TWO_PROCESSES)
  assert again == digests
  assert two_workers == digests


def test_views_differ_across_keys_and_seeds(reference_run, tmp_path):
  digests, _ = reference_run
  assert len(set(digests.values())) == len(digests)
  other_seed, _ = _run_transform(_raw_examples(), _options(seed=7), str(tmp_path), IN_MEMORY)
  assert all(other_seed[key] != digests[key] for key in digests)


def test_serving_graph_has_no_augmix_or_random_op_and_is_deterministic(reference_run, tmp_path):
  _, transform_dir = reference_run
  tft_output = tft.TFTransformOutput(transform_dir)
  # Control: the transform graph itself does hold AugMix, so its absence below means pruning.
  full_transform = tf.saved_model.load(tft_output.transform_savedmodel_dir)
  transform_ops = set()
  for function in full_transform.signatures.values():
    transform_ops |= reachable_op_types(function)
  assert {"ImageProjectiveTransformV3", "StringToHashBucketFast"} <= transform_ops

  config = TrainerConfig(depth=10, width_multiplier=1)
  export_dir = str(tmp_path / "serving")
  export_serving_model(wide_resnet(config), tft_output, export_dir)
  serve = tf.saved_model.load(export_dir).signatures["serving_default"]
  serving_ops = reachable_op_types(serve)
  assert {"Conv2D", "DecodeImage"} <= serving_ops  # Control: the walk reaches model and TFT.
  assert not augmix_or_random_ops(serving_ops)

  examples = tf.constant([_serialized(raw) for raw in _raw_examples(8)])
  first, second = serve(examples=examples), serve(examples=examples)
  np.testing.assert_array_equal(first["probabilities"].numpy(), second["probabilities"].numpy())


def _serialized(raw):
  feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[raw["image"]]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
