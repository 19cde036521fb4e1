"""What AugMix costs through Transform, against the same function over tf.data.

At N images (the embedded digits repeated under distinct keys, 50,000 by default: CIFAR-10's
training set size), with the pipeline's default AugMix settings unless overridden:

1. The Transform component (LocalDagRunner, DirectRunner with one worker per core) with and
   without AugMix on the same data: AugMix's marginal cost in Transform is the difference of
   the two executions' wall times from MLMD.
2. The same view-set function (trainer_module.augmix.encode_view_sets: AugMix, rounding,
   raw bytes) as a parallel tf.data map over the same images, decoded beforehand: the map's
   time is AugMix's marginal cost there. Ratio: tf.data marginal / Transform marginal.
3. Bytes: the train split's gzipped transformed examples per example, with and without views;
   and per view, the views feature alone written as Transform writes it now (uint8 raw bytes)
   and as it did before (float32 values normalised), on the same images.
4. The Trainer's input pipeline (trainer_module.data.training_batches over Transform's output:
   read, parse, select the epoch's view set, decode, normalise, batch) in examples/s, against
   the rate a training step of the default model consumes examples (with their views).

  make bench-augmix                                    # 50,000 images, the defaults
  make bench-augmix ARGS="--images 5000 --aug_count 1 --augmix_view_sets 1"
"""
import argparse
import glob
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402
from ml_metadata.metadata_store import metadata_store  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from components import image_sources  # noqa: E402
from pipeline.config import PipelineConfig, from_preset  # noqa: E402
from pipeline.pipeline import trainer_module_fingerprint, transform_component  # noqa: E402
from trainer_module import augmix, data, preprocessing  # noqa: E402
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE  # noqa: E402
from trainer_module.training_loop import Training  # noqa: E402

_BYTES_SAMPLE = 2000  # Images whose views are written both ways to compare sizes.


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


def run_transform(config: PipelineConfig, data_dir: str) -> tuple:
  """(wall seconds of the Transform execution, its transformed_examples URI, graph URI)."""
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
  seconds = (execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000.0
  outputs = {}
  for event in store.get_events_by_execution_ids([execution.id]):
    if event.type == event.OUTPUT:
      (artifact,) = store.get_artifacts_by_id([event.artifact_id])
      outputs[event.path.steps[0].key] = artifact.uri
  return seconds, outputs["transformed_examples"], outputs["transform_graph"]


def decoded_images(train_file: str) -> tuple:
  """All training images decoded to uint8, with their keys (outside any timing)."""
  spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
          EXAMPLE_KEY: tf.io.FixedLenFeature([], tf.string)}
  images, keys = [], []
  for batch in tf.data.TFRecordDataset([train_file]).batch(1000).map(
      lambda s: tf.io.parse_example(s, spec)):
    images.append(preprocessing.decode_images(batch[IMAGE_KEY]).numpy())
    keys.append(batch[EXAMPLE_KEY].numpy())
  return np.concatenate(images), np.concatenate(keys)


def tf_data_seconds(options: dict, images: np.ndarray, keys: np.ndarray) -> float:
  """The view-set function as a parallel tf.data map over the decoded images."""
  params = augmix.params_from_options(options)
  dataset = (tf.data.Dataset.from_tensor_slices((images, keys)).batch(256)
             .map(lambda i, k: augmix.encode_view_sets(i, k, options["seed"],
                                                       options["num_views"],
                                                       options["view_sets"], params),
                  num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
  start = time.time()
  for _ in dataset:
    pass
  return time.time() - start


def bytes_per_view(options: dict, images: np.ndarray, keys: np.ndarray, work_dir: str) -> tuple:
  """(bytes per view as written now, as written before, images sampled): the views feature
  alone, gzipped."""
  images, keys = images[:_BYTES_SAMPLE], keys[:_BYTES_SAMPLE]
  count, sets = options["num_views"], options["view_sets"]
  params = augmix.params_from_options(options)
  encoded = augmix.encode_view_sets(images, keys, options["seed"], count, sets, params).numpy()
  # Before: the same views (set 0) unrounded, normalised, as float32 values.
  views01 = augmix.augmix_views(images, keys, options["seed"], count, params,
                                epochs=tf.zeros([len(images)], tf.int32)).numpy()
  pixels = images.reshape(-1, 3).astype(np.float64) / 255.0
  floats = (views01 - pixels.mean(axis=0)) / pixels.std(axis=0)

  def size(name, features):
    path = os.path.join(work_dir, name)
    with tf.io.TFRecordWriter(path, "GZIP") as writer:
      for feature in features:
        writer.write(tf.train.Example(features=tf.train.Features(
            feature={"augmix_views": feature})).SerializeToString())
    return os.path.getsize(path)

  compact = size("compact.gz", (tf.train.Feature(bytes_list=tf.train.BytesList(value=list(v)))
                                for v in encoded))
  before = size("float32.gz", (tf.train.Feature(float_list=tf.train.FloatList(
      value=v.astype(np.float32).ravel())) for v in floats))
  return compact / (len(images) * count * sets), before / (len(images) * count), len(images)


def split_bytes(examples_uri: str) -> int:
  return sum(os.path.getsize(f) for f in glob.glob(os.path.join(examples_uri, "Split-train", "*")))


def input_pipeline_rate(config: PipelineConfig, examples_uri: str, graph_uri: str,
                        batches: int) -> float:
  """Examples/s the Trainer's input pipeline delivers (with views), after one warm-up batch."""
  spec = tft.TFTransformOutput(graph_uri).transformed_feature_spec()
  stream = iter(data.training_batches([os.path.join(examples_uri, "Split-train", "*")], spec,
                                      config.trainer))
  next(stream)
  start = time.time()
  for _ in range(batches):
    next(stream)
  return batches * config.trainer.per_core_batch_size / (time.time() - start)


def training_rate(config: PipelineConfig, steps: int, work_dir: str) -> float:
  """Examples/s (each with its views) that training steps of the default model consume."""
  trainer = config.trainer
  batch = trainer.per_core_batch_size
  rng = np.random.default_rng(0)
  tensors = (rng.normal(size=(batch, *IMAGE_SHAPE)).astype(np.float32),
             rng.normal(size=(batch, trainer.num_views, *IMAGE_SHAPE)).astype(np.float32),
             rng.integers(0, trainer.num_classes, batch))
  strategy = tf.distribute.get_strategy()
  training = Training(trainer, strategy, steps_per_epoch=1000,
                      checkpoint_dir=os.path.join(work_dir, "checkpoints"))
  iterator = iter(strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensors(tensors).repeat()))
  for _ in range(2):  # Tracing and allocation.
    training.train_step(iterator)
  start = time.time()
  for _ in range(steps):
    loss = training.train_step(iterator)
  float(loss)
  return steps * batch / (time.time() - start)


def main(argv=None) -> None:
  defaults = from_preset().trainer
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--images", type=int, default=50_000)
  parser.add_argument("--aug_count", type=int, default=max(defaults.aug_count, 1))
  parser.add_argument("--augmix_view_sets", type=int, default=defaults.augmix_view_sets)
  parser.add_argument("--beam_running_mode", default=PipelineConfig.beam_running_mode)
  parser.add_argument("--train_steps", type=int, default=10)
  parser.add_argument("--input_batches", type=int, default=200)
  args = parser.parse_args(argv)
  if args.aug_count < 1 or args.augmix_view_sets < 1:
    parser.error("--aug_count and --augmix_view_sets must be >= 1")
  work_dir = tempfile.mkdtemp(prefix="bench-augmix-")
  data_dir = os.path.join(work_dir, "data")
  config = from_preset().replace(
      output_dir=work_dir, pipeline_name="bench_augmix",
      beam_running_mode=args.beam_running_mode, augmix=True, augmix_online=False,
      aug_count=args.aug_count, augmix_view_sets=args.augmix_view_sets)
  options = config.trainer.transform_options()
  train_file = write_images(data_dir, args.images)
  images, keys = decoded_images(train_file)

  data_seconds = tf_data_seconds(options, images, keys)
  with_seconds, with_uri, graph_uri = run_transform(config, data_dir)
  without_seconds, without_uri, _ = run_transform(
      config.replace(augmix=False, pipeline_name="bench_no_augmix"), data_dir)
  compact_view, float_view, sample = bytes_per_view(options, images, keys, work_dir)
  input_rate = input_pipeline_rate(config, with_uri, graph_uri, args.input_batches)
  consumed_rate = training_rate(config, args.train_steps, work_dir)

  n, views = args.images, args.aug_count * args.augmix_view_sets
  marginal = with_seconds - without_seconds
  trainer = config.trainer
  print(f"AugMix, {n} images, aug_count {args.aug_count} x {args.augmix_view_sets} view set(s), "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
  print(f"  Transform component ({' '.join(config.beam_pipeline_args())}): with AugMix "
        f"{with_seconds:.1f}s, without {without_seconds:.1f}s; marginal {marginal:.1f}s "
        f"({n * views / marginal:.0f} views/s)")
  print(f"  tf.data map of the same function: {data_seconds:.1f}s ({n * views / data_seconds:.0f} "
        f"views/s)")
  print(f"  marginal ratio tf.data / Transform: {data_seconds / marginal:.2f} (goal >= 0.8)")
  with_bytes, without_bytes = split_bytes(with_uri) / n, split_bytes(without_uri) / n
  print(f"  train split, gzipped: {with_bytes:.0f} bytes/example with views, "
        f"{without_bytes:.0f} without ({(with_bytes - without_bytes) / views:.0f} per view)")
  print(f"  views feature alone, gzipped, {sample} images: {compact_view:.0f} bytes/view "
        f"as uint8, {float_view:.0f} as float32 before: {compact_view / float_view:.2f} "
        f"(goal <= 0.33)")
  print(f"  Trainer input pipeline: {input_rate:.0f} examples/s; training step of WRN-"
        f"{trainer.depth}-{trainer.width_multiplier} (batch {trainer.per_core_batch_size}, "
        f"{trainer.num_views} view(s)) consumes {consumed_rate:.0f} examples/s: "
        f"{input_rate / consumed_rate:.1f}x (goal >= 3x)")


if __name__ == "__main__":
  main()
