"""Small Transform runs on Beam (tft_beam), the way the Transform component runs them."""
import glob
import hashlib
import os
import shutil
import tempfile

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.options.pipeline_options import PipelineOptions
from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils

from components.image_sources import digits_to_images, encode_png
from test_support.tiny_config import plain_trainer
from trainer_module import preprocessing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RAW_SPEC = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "key": tf.io.FixedLenFeature([], tf.string)}


def raw_digit_examples(count=40):
  from sklearn.datasets import load_digits
  images = digits_to_images(load_digits().images[:count])
  return [{"image": encode_png(image), "label": i % 10, "key": f"digits-{i:04d}"}
          for i, image in enumerate(images)]


def run_transform(raw, options, output_dir, beam_args, eval_raw=()):
  """Analyze + transform `raw` (the train split) with Beam, as Transform does, and transform
  `eval_raw` with the result; returns ({key: sha256 of the AugMix view sets' bytes} (empty
  without views), the transform output directory). The transformed examples are written to
  `<output_dir>/transformed*.gz`."""
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
      coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
      _ = transformed | beam.io.WriteToTFRecord(  # Gzipped, as TFX's Transform writes them.
          records, coder=coder, file_name_suffix=".gz")
      if eval_raw:
        eval_data = pipeline | "CreateEval" >> beam.Create(eval_raw, reshuffle=False)
        eval_transformed, _ = ((eval_data, metadata), transform_fn) | tft_beam.TransformDataset()
        _ = eval_transformed | "WriteEval" >> beam.io.WriteToTFRecord(
            records + "_eval", coder=coder, file_name_suffix=".gz")
      _ = transform_fn | tft_beam.WriteTransformFn(transform_dir)
  # TFX's Transform also records the raw schema, which the serving signature parses with.
  metadata_io.write_metadata(
      metadata, os.path.join(transform_dir, tft.TFTransformOutput.RAW_METADATA_DIR))
  spec = tft.TFTransformOutput(transform_dir).transformed_feature_spec()
  digests = {}
  if "augmix_views" not in spec:
    return digests, transform_dir
  for record in tf.data.TFRecordDataset(tf.io.gfile.glob(records + "*"), "GZIP"):
    features = tf.io.parse_single_example(record, spec)
    digests[features["key"].numpy().decode()] = hashlib.sha256(
        b"".join(features["augmix_views"].numpy())).hexdigest()
  return digests, transform_dir


def digits_transform_dir(count=8):
  """The transform output (transform_fn) of the first `count` digits with the default options:
  made once and shared by every test process (cached_run)."""
  return os.path.join(cached_run(_transform_digits, count), "transform_fn")


def transformed_digits(count=160, eval_count=32):
  """Digits through Transform, split into train/ and eval/ gzipped files like Transform's
  output (cached_run: shared, read only); returns the trainer's flags for them: train_files,
  eval_files, transform_output."""
  output_dir = cached_run(_transform_and_split_digits, count, eval_count)
  return {"train_files": os.path.join(output_dir, "train", "*"),
          "eval_files": os.path.join(output_dir, "eval", "*"),
          "transform_output": os.path.join(output_dir, "transform_fn")}


def cached_run(make, *args) -> str:
  """The directory `make(directory, *args)` fills, made once per machine and then read by every
  test process (xdist's workers, each mutant of `make mutation`): a Transform run costs seconds
  of Beam, and the tests read its output only. Kept under the temporary directory, named by a
  digest of `make`, its arguments, the library versions and every source file under
  trainer_module/ and components/ (what the run executes), so a change to any of them makes a
  new one. Made in a directory of its own and renamed into place: no process reads one
  half-written."""
  digest = hashlib.sha256(repr((make.__name__, args, tf.__version__, tft.__version__,
                                beam.__version__)).encode())
  for path in sorted(glob.glob(os.path.join(REPO, "trainer_module", "**", "*.py"), recursive=True) +
                     glob.glob(os.path.join(REPO, "components", "**", "*.py"), recursive=True) +
                     [os.path.abspath(__file__)]):
    if not path.endswith("_test.py"):
      with open(path, "rb") as f:
        digest.update(f.read())
  final = os.path.join(tempfile.gettempdir(), f"wrn-test-{make.__name__.strip('_')}-"
                       f"{digest.hexdigest()[:16]}")
  if not os.path.isdir(final):
    staging = tempfile.mkdtemp(prefix=os.path.basename(final) + ".making-")
    make(staging, *args)
    try:
      os.rename(staging, final)
    except OSError:  # Another process made it first: theirs is the same.
      shutil.rmtree(staging)
  return final


def _transform_digits(output_dir, count):
  run_transform(raw_digit_examples(count), plain_trainer().transform_options(), output_dir,
                ["--direct_running_mode=in_memory"])


def _transform_and_split_digits(output_dir, count, eval_count):
  _transform_digits(output_dir, count)
  records = list(tf.data.TFRecordDataset(
      tf.io.gfile.glob(os.path.join(output_dir, "transformed*.gz")), "GZIP").as_numpy_iterator())
  splits = {"train": records[eval_count:], "eval": records[:eval_count]}
  for split, split_records in splits.items():
    os.makedirs(os.path.join(output_dir, split))
    with tf.io.TFRecordWriter(os.path.join(output_dir, split, "part-0.gz"), "GZIP") as writer:
      for record in split_records:
        writer.write(record)
