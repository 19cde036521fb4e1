"""What AugMix costs through Transform, against the same function over tf.data.

At N images (the embedded digits repeated under distinct keys, 50,000 by default: CIFAR-10's
training set size), with the pipeline's default AugMix settings unless overridden:

1. The Transform component (LocalDagRunner, DirectRunner with one worker per core) with and
   without AugMix on the same data: AugMix's marginal cost in Transform is the difference of
   the two executions' wall times from MLMD, and of the runs' CPU seconds (this process and
   Beam's workers). Wall times follow whatever else loads the machine; CPU seconds hardly do.
   `--repeats` interleaves runs with and without and keeps the best of each.
2. The same view-set function (trainer_module.augmix.encode_view_sets: AugMix, rounding,
   PNG) as a parallel tf.data map over the same images, decoded beforehand: the map's wall
   and CPU time are AugMix's marginal cost there. Ratio: tf.data marginal / Transform marginal.
3. Bytes: the train split's gzipped transformed examples per example, with and without views;
   and per view, the views feature alone gzipped, as stored (PNG of channel planes), as uint8
   raw bytes and as normalised float32 values, on the digits (grey) and on colour crops of
   scikit-learn's two sample photographs (CIFAR-10's kind of image).
4. The Trainer's input pipeline (trainer_module.data.training_batches over Transform's output:
   read, parse, select the epoch's view set, decode, normalise, batch) in examples/s, against
   the rate a training step of the default model consumes examples (with their views).

`--robustness=online,15,4,2,1` instead trains the default pipeline once per AugMix source
(online AugMix, or that many view sets; the same seed and config otherwise) and prints eval
accuracy, cA and cNLL on the reference corruptions, Transform's time and bytes. With the
default 15 epochs, 15 view sets are exactly online AugMix's views rounded to uint8: that pair
measures the rounding's effect on training.

  make bench-augmix                                    # 50,000 images, the defaults
  make bench-augmix ARGS="--images 5000 --aug_count 1 --augmix_view_sets 1 --repeats 2"
  make bench-augmix ARGS="--robustness online,15,4,2,1"
  make bench-augmix ARGS="--robustness online,6,1 --pipeline_flags=--train_epochs=6"
"""
import glob
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_transform as tft  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from components import image_sources  # noqa: E402
from components.calibration_metrics import NLL_NAME  # noqa: E402
from components import tfma_results  # noqa: E402
from reporting import figures  # noqa: E402
from configs.flags import field_help, over_defaults  # noqa: E402
from pipeline.config import BeamConfig, PipelineConfig, from_flags, from_preset  # noqa: E402
from pipeline.evaluation import ACCURACY_NAME  # noqa: E402
from pipeline.pipeline import trainer_module_fingerprint, transform_component  # noqa: E402
from local_runner.run_record import RunRecord  # noqa: E402
from trainer_module import augmix, data, preprocessing  # noqa: E402
from trainer_module.config import AugMixConfig  # noqa: E402
from trainer_module.features import (EXAMPLE_KEY, IMAGE_KEY, IMAGE_SHAPE,  # noqa: E402
                                     PROBABILITIES_KEY)
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
  """(wall seconds of the Transform execution, its transformed_examples URI, graph URI). Timed
  whole, the run's CPU seconds include ImportExampleGen's, the same work with and without
  AugMix, so the difference of two runs is Transform's."""
  examples = tfx.components.ImportExampleGen(
      input_base=data_dir,
      input_config=tfx.proto.Input(splits=[tfx.proto.Input.Split(name=s, pattern=f"{s}/*")
                                           for s in ("train", "eval")]))
  schema = tfx.components.ImportSchemaGen(schema_file=config.data.schema_path)
  transform = transform_component(config, examples.outputs["examples"], schema.outputs["schema"],
                                  trainer_module_fingerprint())
  os.makedirs(os.path.dirname(config.runner.metadata_path), exist_ok=True)
  connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
      config.runner.metadata_path)
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name=config.runner.pipeline_name, pipeline_root=config.runner.pipeline_root,
      components=[examples, schema, transform], enable_cache=False,
      metadata_connection_config=connection, beam_pipeline_args=config.beam_pipeline_args()))
  from ml_metadata.metadata_store import metadata_store
  store = metadata_store.MetadataStore(connection)
  ((execution_id, seconds),) = harness.execution_seconds(connection, "Transform").items()
  outputs = {}
  for event in store.get_events_by_execution_ids([execution_id]):
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


def tf_data_views(options: dict, images: np.ndarray, keys: np.ndarray) -> None:
  """The view-set function as a parallel tf.data map over the decoded images."""
  params = augmix.params_from_options(options)
  dataset = (tf.data.Dataset.from_tensor_slices((images, keys)).batch(256)
             .map(lambda i, k: augmix.encode_view_sets(i, k, options["seed"],
                                                       options["num_views"],
                                                       options["view_sets"], params),
                  num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
  for _ in dataset:
    pass


def colour_images(count: int) -> np.ndarray:
  """`count` 32x32 colour images (CIFAR's kind; the digits are grey): 96x96 crops of the two
  photographs shipped in scikit-learn, area-downscaled, at seeded positions."""
  from sklearn.datasets import load_sample_images
  photos = load_sample_images().images
  rng = np.random.default_rng(0)
  crops = []
  for _ in range(count):
    photo = photos[rng.integers(len(photos))]
    top, left = rng.integers(0, photo.shape[0] - 96), rng.integers(0, photo.shape[1] - 96)
    crops.append(photo[top:top + 96, left:left + 96])
  return tf.cast(tf.round(tf.image.resize(np.stack(crops), IMAGE_SHAPE[:2], method="area")),
                 tf.uint8).numpy()


def bytes_per_view(options: dict, images: np.ndarray, keys: np.ndarray, work_dir: str) -> dict:
  """Bytes per view of the views feature alone, gzipped as Transform writes it, for the view
  sets as stored (PNG of channel planes), as uint8 raw bytes in the images' layout (the
  previous format) and as normalised float32 values (the first format): {format: bytes}."""
  count, sets = options["num_views"], options["view_sets"]
  params = augmix.params_from_options(options)
  stored = tf.function(augmix.encode_view_sets)(images, keys, options["seed"], count, sets,
                                                params).numpy()
  views01 = tf.function(augmix.augmix_views)(images, keys, options["seed"], count, params,
                                             epochs=tf.zeros([len(images)], tf.int32)).numpy()
  rounded = np.clip(np.round(views01 * 255.0), 0, 255).astype(np.uint8)
  pixels = images.reshape(-1, 3).astype(np.float64) / 255.0
  floats = ((views01 - pixels.mean(axis=0)) / pixels.std(axis=0)).astype(np.float32)

  def size(features):
    path = os.path.join(work_dir, "views.gz")
    with tf.io.TFRecordWriter(path, "GZIP") as writer:
      for feature in features:
        writer.write(tf.train.Example(features=tf.train.Features(
            feature={"augmix_views": feature})).SerializeToString())
    return os.path.getsize(path)

  as_bytes = lambda values: tf.train.Feature(bytes_list=tf.train.BytesList(value=values))  # noqa
  return {
      "png": size(as_bytes(list(v)) for v in stored) / (len(images) * count * sets),
      "raw": size(as_bytes([v.tobytes()]) for v in rounded) / (len(images) * count),
      "float32": size(tf.train.Feature(float_list=tf.train.FloatList(value=v.ravel()))
                      for v in floats) / (len(images) * count)}


def split_bytes(examples_uri: str) -> int:
  return sum(os.path.getsize(f) for f in glob.glob(os.path.join(examples_uri, "Split-train", "*")))


def input_pipeline_rate(config: PipelineConfig, examples_uri: str, graph_uri: str,
                        batches: int) -> float:
  """Examples/s the Trainer's input pipeline delivers (with views), after one warm-up batch."""
  spec = tft.TFTransformOutput(graph_uri).transformed_feature_spec()
  stream = iter(data.training_batches([os.path.join(examples_uri, "Split-train", "*")], spec,
                                      config.trainer))
  next(stream)
  seconds = harness.timed(lambda: [next(stream) for _ in range(batches)]).wall
  return batches * config.trainer.training.per_core_batch_size / seconds


def training_rate(config: PipelineConfig, steps: int, work_dir: str) -> float:
  """Examples/s (each with its views) that training steps of the default model consume."""
  trainer = config.trainer
  batch = trainer.training.per_core_batch_size
  rng = np.random.default_rng(0)
  tensors = (rng.normal(size=(batch, *IMAGE_SHAPE)).astype(np.float32),
             rng.normal(size=(batch, trainer.augmentation.num_views,
                              *IMAGE_SHAPE)).astype(np.float32),
             rng.integers(0, trainer.model.num_classes, batch))
  strategy = tf.distribute.get_strategy()
  training = Training(trainer, strategy, steps_per_epoch=1000,
                      checkpoint_dir=os.path.join(work_dir, "checkpoints"))
  iterator = iter(strategy.experimental_distribute_dataset(
      tf.data.Dataset.from_tensors(tensors).repeat()))
  for _ in range(2):  # Tracing and allocation.
    training.train_step(iterator)
  seconds = harness.timed(lambda: float([training.train_step(iterator)
                                         for _ in range(steps)][-1])).wall
  return steps * batch / seconds


def speed(args) -> None:
  """Items 1-4 of the module docstring, printed."""
  work_dir = tempfile.mkdtemp(prefix="bench-augmix-")
  data_dir = os.path.join(work_dir, "data")
  config = from_preset().replace(
      output_dir=work_dir, pipeline_name="bench_augmix",
      beam_running_mode=args.beam_running_mode, augmix=True, augmix_online=False,
      aug_count=args.aug_count, augmix_view_sets=args.augmix_view_sets)
  options = config.trainer.transform_options()
  train_file = write_images(data_dir, args.images)
  images, keys = decoded_images(train_file)

  tf_data = harness.timed(tf_data_views, options, images, keys)
  data_seconds, data_cpu = tf_data.wall, tf_data.cpu
  runs = harness.alternate({  # Interleaved: a load change hits both alike.
      name: lambda name=name, augmix_on=augmix_on, counter=iter(range(args.repeats)):
          run_transform(config.replace(augmix=augmix_on,
                                       pipeline_name=f"bench_{name}_{next(counter)}"), data_dir)
      for name, augmix_on in (("augmix", True), ("no_augmix", False))}, args.repeats)
  (with_seconds, with_cpu), (without_seconds, without_cpu) = (
      (min(run.value[0] for run in runs[name]), min(run.cpu for run in runs[name]))
      for name in ("augmix", "no_augmix"))
  _, with_uri, graph_uri = runs["augmix"][0].value
  without_uri = runs["no_augmix"][0].value[1]
  sample = min(_BYTES_SAMPLE, len(images))
  digit_bytes = bytes_per_view(options, images[:sample], keys[:sample], work_dir)
  colour_bytes = bytes_per_view(options, colour_images(sample), keys[:sample], work_dir)
  input_rate = input_pipeline_rate(config, with_uri, graph_uri, args.input_batches)
  consumed_rate = training_rate(config, args.train_steps, work_dir)

  n, views = args.images, args.aug_count * args.augmix_view_sets
  marginal, marginal_cpu = with_seconds - without_seconds, with_cpu - without_cpu
  trainer = config.trainer
  print(f"AugMix, {n} images, aug_count {args.aug_count} x {args.augmix_view_sets} view set(s), "
        f"{os.cpu_count()} cores, {harness.load_average()}, best of "
        f"{args.repeats} interleaved run(s) each")
  print(f"  Transform component ({' '.join(config.beam_pipeline_args())}): with AugMix "
        f"{with_seconds:.1f}s wall / {with_cpu:.1f}s CPU, without {without_seconds:.1f}s / "
        f"{without_cpu:.1f}s; marginal {marginal:.1f}s wall ({n * views / marginal:.0f} views/s)"
        f" / {marginal_cpu:.1f}s CPU")
  print(f"  tf.data map of the same function: {data_seconds:.1f}s wall "
        f"({n * views / data_seconds:.0f} views/s) / {data_cpu:.1f}s CPU")
  print(f"  marginal ratio tf.data / Transform: {data_seconds / marginal:.2f} wall, "
        f"{data_cpu / marginal_cpu:.2f} CPU (goal >= 0.8)")
  with_bytes, without_bytes = split_bytes(with_uri) / n, split_bytes(without_uri) / n
  print(f"  train split, gzipped: {with_bytes:.0f} bytes/example with views, "
        f"{without_bytes:.0f} without ({(with_bytes - without_bytes) / views:.0f} per view)")
  for name, sizes in (("digits", digit_bytes), ("colour photo crops", colour_bytes)):
    print(f"  views feature alone, gzipped, {sample} {name}: {sizes['png']:.0f} bytes/view as "
          f"stored (PNG planes), {sizes['raw']:.0f} as uint8 raw bytes, {sizes['float32']:.0f} "
          f"as float32: {sizes['png'] / sizes['float32']:.2f} of float32 (goal <= 0.33)")
  model = trainer.model
  print(f"  Trainer input pipeline: {input_rate:.0f} examples/s; training step of WRN-"
        f"{model.depth}-{model.width_multiplier} (batch {trainer.training.per_core_batch_size}, "
        f"{trainer.augmentation.num_views} view(s)) consumes {consumed_rate:.0f} examples/s: "
        f"{input_rate / consumed_rate:.1f}x (goal >= 3x)")


def execution_seconds(config: PipelineConfig, component: str) -> float:
  """Wall seconds of the newest execution of a component (by type) in config's MLMD."""
  executions = harness.execution_seconds(
      tfx.orchestration.metadata.sqlite_metadata_connection_config(config.runner.metadata_path),
      component)
  return executions[max(executions)]


def robustness(args) -> None:
  """One default pipeline run (`python -m local_runner`, the default model on the digits) per
  AugMix source in args.robustness, in one output directory (so everything but Transform,
  Trainer and what follows them is cached), printing each run's figures as it ends."""
  output_dir = args.output_dir or tempfile.mkdtemp(prefix="bench-augmix-robustness-")
  os.makedirs(output_dir, exist_ok=True)
  print(f"AugMix sources, default pipeline model, outputs in {output_dir}; "
        f"{os.cpu_count()} cores", flush=True)
  for source in args.robustness.split(","):
    own = [f"--output_dir={output_dir}", "--max_eval_ece=0",  # No run becomes a baseline.
           f"--aug_count={args.aug_count}",
           "--augmix_online=true" if source == "online" else f"--augmix_view_sets={int(source)}"]
    flags = over_defaults(own, args.pipeline_flags.split())
    config = from_flags(flags)
    with open(os.path.join(output_dir, f"bench-{source}.log"), "w") as log:
      run_seconds = harness.timed(subprocess.run, [sys.executable, "-m", "local_runner", *flags],
                                  check=True, stdout=log, stderr=subprocess.STDOUT).wall
    run = RunRecord(config)
    values = tfma_results.load_metrics(run.latest_output("evaluation").uri)
    means = figures.corrupted_means(values, PROBABILITIES_KEY, config.evaluation.corruptions)
    accuracy = tfma_results.metric(values, figures.EVAL, PROBABILITIES_KEY, ACCURACY_NAME)
    examples = run.latest_output("transformed_examples").uri
    name = "online" if source == "online" else f"{source} view set(s)"
    print(f"  {name}: eval accuracy {accuracy:.4f}, cA {means[ACCURACY_NAME]:.4f}, cNLL "
          f"{means[NLL_NAME]:.3f}; Transform {execution_seconds(config, 'Transform'):.0f}s, "
          f"train split {split_bytes(examples) / 2**20:.1f} MiB; Trainer "
          f"{execution_seconds(config, 'Trainer'):.0f}s; run {run_seconds:.0f}s "
          f"({' '.join(flags[1:])})", flush=True)


def build_parser():
  defaults = from_preset().trainer.augmentation
  augmix_help = field_help(AugMixConfig)
  return harness.parser(__doc__, *(
      harness.Flag("images", 50_000, "training images: the embedded digits repeated under "
                   "distinct keys (default %(default)s, CIFAR-10's training set size)"),
      harness.Flag("aug_count", max(defaults.aug_count, 1), augmix_help["aug_count"] +
                   " Default %(default)s: the preset's, at least 1."),
      harness.Flag("augmix_view_sets", defaults.augmix_view_sets,
                   augmix_help["augmix_view_sets"] + " Default %(default)s: the preset's."),
      harness.Flag("beam_running_mode", BeamConfig.beam_running_mode, "Transform's Beam running "
                   "mode, default %(default)s (the pipeline's). " +
                   field_help(BeamConfig)["beam_running_mode"]),
      harness.repeats(1, "Transform runs with and without AugMix; the best of each counts"),
      harness.Flag("train_steps", 10, "timed training steps of the default model, after two "
                   "untimed ones, for the examples/s a step consumes (default %(default)s)"),
      harness.Flag("input_batches", 200, "timed batches of the Trainer's input pipeline, after "
                   "one untimed batch, for its examples/s (default %(default)s)"),
      harness.Flag("robustness", "", "instead: train the default pipeline once per AugMix "
                   "source, e.g. 'online,15,4,2,1' (online AugMix, or that many view sets); "
                   "default: the speed measurements"),
      harness.Flag("pipeline_flags", "", "more local_runner flags for every --robustness run, "
                   "space-separated in one argument, e.g. --pipeline_flags=--train_epochs=6 "
                   "(default: none)"),
      harness.Flag("output_dir", "", "--robustness runs' output directory (default: a new "
                   "temporary directory)")))


def main(argv=None) -> None:
  parser = build_parser()
  args = parser.parse_args(argv)
  if args.aug_count < 1 or args.augmix_view_sets < 1 or args.repeats < 1:
    parser.error("--aug_count, --augmix_view_sets and --repeats must be >= 1")
  sources = [s for s in args.robustness.split(",") if s]
  if any(s != "online" and not (s.isdigit() and int(s) >= 1) for s in sources):
    parser.error(f"--robustness={args.robustness}: each entry must be 'online' or a count >= 1")
  (robustness if sources else speed)(args)


if __name__ == "__main__":
  main()
