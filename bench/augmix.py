"""AugMix throughput: the Transform component on Beam vs the same function over tf.data.

Both paths read the same TFRecords of N images (the embedded digits, repeated under distinct
keys) and produce normalised clean images plus AugMix views with the same code
(trainer_module.preprocessing / trainer_module.augmix). The Beam path is TFX's Transform
component run by LocalDagRunner on the DirectRunner with one worker per core; its time is the
Transform execution's wall time from MLMD (analysis pass, transform pass and writing the
transformed examples included). The tf.data path decodes, augments and normalises with a
parallel map on both cores. Prints images/s of each and their ratio, and, for reference, the
Transform component on the same images without AugMix (its fixed cost).

  make bench-augmix                       # 10,000 images, aug_count 1
  make bench-augmix ARGS="--images 2000 --aug_count 2"
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import tensorflow as tf  # noqa: E402
from ml_metadata.metadata_store import metadata_store  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from components import image_sources  # noqa: E402
from pipeline.config import PipelineConfig  # noqa: E402
from pipeline.pipeline import trainer_module_fingerprint, transform_component  # noqa: E402
from trainer_module import augmix, preprocessing  # noqa: E402
from trainer_module.config import TrainerConfig  # noqa: E402
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY  # noqa: E402


def write_images(data_dir: str, count: int) -> str:
  """`count` training images (digits repeated under distinct keys) and a small eval split."""
  from sklearn.datasets import load_digits
  digits = load_digits()
  images = image_sources.digits_to_images(digits.images)
  pngs = [image_sources.encode_png(image) for image in images]
  for split, size in (("train", count), ("eval", 64)):
    os.makedirs(os.path.join(data_dir, split), exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(data_dir, split, "images.tfrecord")) as writer:
      for i in range(size):
        example = image_sources.make_example(f"bench-{split}-{i:06d}", pngs[i % len(pngs)],
                                             int(digits.target[i % len(pngs)]))
        writer.write(example.SerializeToString())
  return os.path.join(data_dir, "train", "images.tfrecord")


def beam_transform_seconds(config: PipelineConfig, data_dir: str) -> float:
  examples = tfx.components.ImportExampleGen(
      input_base=data_dir,
      input_config=tfx.proto.Input(splits=[tfx.proto.Input.Split(name=s, pattern=f"{s}/*")
                                           for s in ("train", "eval")]))
  schema = tfx.components.ImportSchemaGen(schema_file=config.schema_path)
  transform = transform_component(config, examples.outputs["examples"], schema.outputs["schema"],
                                  trainer_module_fingerprint())
  os.makedirs(os.path.dirname(config.metadata_path), exist_ok=True)
  connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(config.metadata_path)
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name=config.pipeline_name, pipeline_root=config.pipeline_root,
      components=[examples, schema, transform], enable_cache=False,
      metadata_connection_config=connection, beam_pipeline_args=config.beam_pipeline_args()))
  store = metadata_store.MetadataStore(connection)
  (execution,) = [e for e in store.get_executions()
                  if store.get_execution_types_by_id([e.type_id])[0].name.endswith("Transform")]
  return (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000.0


def tf_data_seconds(trainer: TrainerConfig, train_file: str) -> float:
  options = trainer.transform_options()
  params = augmix.params_from_options(options)
  spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
          EXAMPLE_KEY: tf.io.FixedLenFeature([], tf.string)}
  mean, std = tf.constant([0.3, 0.3, 0.3]), tf.constant([0.4, 0.4, 0.4])

  def process(serialized):
    features = tf.io.parse_example(serialized, spec)
    images = preprocessing.decode_images(features[IMAGE_KEY])
    clean = preprocessing.normalize(tf.cast(images, tf.float32) / 255.0, mean, std)
    views = augmix.augmix_views(images, features[EXAMPLE_KEY], options["seed"],
                                options["num_views"], params)
    return clean, preprocessing.normalize(views, mean, std)

  dataset = (tf.data.TFRecordDataset([train_file]).batch(256)
             .map(process, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
  start = time.time()
  for _ in dataset:
    pass
  return time.time() - start


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=10_000)
  parser.add_argument("--aug_count", type=int, default=1)
  parser.add_argument("--beam_running_mode", default=PipelineConfig.beam_running_mode)
  args = parser.parse_args(argv)
  if args.aug_count < 1:
    parser.error("--aug_count must be >= 1")
  work_dir = tempfile.mkdtemp(prefix="bench-augmix-")
  data_dir = os.path.join(work_dir, "data")
  config = PipelineConfig(output_dir=work_dir, pipeline_name="bench_augmix",
                          beam_running_mode=args.beam_running_mode).replace(
                              augmix=True, aug_count=args.aug_count)
  train_file = write_images(data_dir, args.images)

  data_seconds = tf_data_seconds(config.trainer, train_file)
  beam_seconds = beam_transform_seconds(config, data_dir)
  plain_seconds = beam_transform_seconds(
      config.replace(augmix=False, pipeline_name="bench_no_augmix"), data_dir)
  beam_rate, data_rate = args.images / beam_seconds, args.images / data_seconds
  print(f"AugMix, {args.images} images, aug_count {args.aug_count}, {os.cpu_count()} cores")
  print(f"  Transform component on Beam ({' '.join(config.beam_pipeline_args())}): "
        f"{beam_seconds:.1f}s, {beam_rate:.0f} images/s")
  print(f"  tf.data map (same function):  {data_seconds:.1f}s, {data_rate:.0f} images/s")
  print(f"  ratio Beam / tf.data: {beam_rate / data_rate:.2f}x")
  print(f"  reference: Transform component without AugMix: {plain_seconds:.1f}s, "
        f"{args.images / plain_seconds:.0f} images/s")


if __name__ == "__main__":
  main()
