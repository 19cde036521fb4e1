"""Evaluator throughput: TFX's Evaluator component (TFMA on Beam) vs model calls + numpy metrics.

Both paths score the same evaluation set (the clean eval and test splits and the corrupted test
images of a `make run` output, rebuilt here with --examples_per_corruption) with the same
SavedModel (the run's latest Trainer output) and the pipeline's own metrics and slices:
- Evaluator: the pipeline's component (components/evaluator.py: TFX's, with the input batches
  regrouped), run by LocalDagRunner on the DirectRunner in the Beam mode given, with the
  pipeline's EvalConfig (no baseline); its time is the execution's wall time in MLMD (Beam
  start-up, reading, inference, metrics and writing included).
- direct: the serving signature called on batches of serialized examples in this process, then
  accuracy, NLL, ECE and Brier score in numpy (test_support/reference_metrics.py) on the same slices and
  both outputs (temperature-scaled and raw probabilities).
Prints examples/s of each, their ratio, and the clean eval metrics of both as a cross-check.
The direct path runs `--direct_runs` times and the fastest counts: its first run in a process
takes up to 1.7x the wall time of the later ones for the same CPU time (here 11.4 s against
6.6 s, both about 11.6 CPU s), and a ratio against that would flatter the Evaluator. The CPU
seconds of each path (this process and its finished children) and their ratio are printed too:
on two shared cores they vary by about 5% where wall times vary by 50%.

  make run && make bench-evaluator
  make bench-evaluator ARGS="--examples_per_corruption 100 --output_dir outputs"
"""
import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import harness  # noqa: E402

import pipeline  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tfx import v1 as tfx  # noqa: E402

from components import evaluation_set  # noqa: E402
from components.evaluator import Evaluator  # noqa: E402
from components import tfma_results  # noqa: E402
from configs.flags import field_help  # noqa: E402
from pipeline.config import (BeamConfig, EvaluationConfig, PipelineConfig,  # noqa: E402
                             from_preset, robustness_source)
from pipeline.evaluation import ACCURACY_NAME, SLICING_SPECS, eval_config  # noqa: E402
from local_runner.run_record import RunRecord  # noqa: E402
from test_support import reference_metrics  # noqa: E402
from trainer_module.features import (LABEL_KEY, PROBABILITIES_KEY,  # noqa: E402
                                     UNCALIBRATED_PROBABILITIES_KEY)

SPLITS = [evaluation_set.EVAL, evaluation_set.TEST, evaluation_set.CORRUPTED]
_BATCH = 256
FLAGS = (harness.output_dir("a `make run` output directory"),
         harness.Flag("examples_per_corruption", 0, field_help(EvaluationConfig)[
             "examples_per_corruption"] + " Here the default is 0."),
         harness.Flag("beam_running_mode", BeamConfig.beam_running_mode,
                      field_help(BeamConfig)["beam_running_mode"] + " Here: the Evaluator's."),
         harness.Flag("inference_batch_size", PipelineConfig().trainer.training.eval_batch_size,
                      "rows the Evaluator regroups its input batches to before calling the model "
                      "(default %(default)s, the pipeline's: the trainer's eval_batch_size); 0: "
                      "Beam's own adaptive batches"),
         harness.Flag("direct_runs", 2, "runs of the direct path; the fastest is the baseline "
                      "(default %(default)s)"))


def build_evaluation_set(config: PipelineConfig, per_corruption: int, output_uri: str) -> int:
  examples = RunRecord(config).latest_output("examples")
  if examples is None:
    raise SystemExit(
        f"No ExampleGen output in {config.runner.metadata_path}; run `make run` first.")
  splits = json.loads(examples.properties["split_names"].string_value)
  counts = evaluation_set.write_evaluation_set(
      examples.uri, splits, output_uri, robustness_source(config.data.dataset),
      list(config.evaluation.corruptions), per_corruption, config.data.tfds_data_dir)
  return sum(counts.values())


def run_evaluator(config: PipelineConfig, model_uri: str, examples_uri: str,
                      work_dir: str, inference_batch_size: int) -> tuple:
  tfma_config = eval_config(config)
  tfma_config.model_specs[0].inference_batch_size = inference_batch_size
  examples = tfx.dsl.Importer(
      source_uri=examples_uri, artifact_type=tfx.types.standard_artifacts.Examples,
      properties={"split_names": '["' + '","'.join(SPLITS) + '"]'}).with_id("examples")
  model = tfx.dsl.Importer(source_uri=model_uri,
                           artifact_type=tfx.types.standard_artifacts.Model).with_id("model")
  evaluator = Evaluator(examples=examples.outputs["result"], model=model.outputs["result"],
                        example_splits=SPLITS, eval_config=tfma_config)
  metadata_path = os.path.join(work_dir, "metadata.sqlite")
  connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path)
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name="bench_evaluator", pipeline_root=os.path.join(work_dir, "root"),
      components=[examples, model, evaluator], enable_cache=False,
      metadata_connection_config=connection,
      # What the pipeline picks: the engine for the input data's size (pipeline/pipeline.py).
      beam_pipeline_args=config.beam_pipeline_args(config.data.input_examples)))
  from ml_metadata.metadata_store import metadata_store
  (output,) = metadata_store.MetadataStore(connection).get_artifacts_by_type("ModelEvaluation")
  (seconds,) = harness.execution_seconds(connection, "Evaluator").values()
  return seconds, output.uri


# The features the pipeline slices by. The corrupted examples' own default to a value none of
# them carries, which marks a clean example as outside those slices.
_SLICE_FEATURES = {LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
                   "eval_set": tf.io.FixedLenFeature([], tf.string),
                   "corruption": tf.io.FixedLenFeature([], tf.string, default_value=""),
                   "severity": tf.io.FixedLenFeature([], tf.int64, default_value=0),
                   "corruption_family": tf.io.FixedLenFeature([], tf.string, default_value="")}


def _slice_masks(features: dict) -> dict:
  """The pipeline's slices (pipeline/evaluation.py's SLICING_SPECS) as boolean masks, keyed
  (feature, value, feature, value, ...): one per combination of values among the examples that
  carry every feature of the spec."""
  masks = {}
  for spec in SLICING_SPECS:
    keys = list(spec.feature_keys)
    carry = np.ones(len(features[LABEL_KEY]), bool)
    for key in keys:
      if _SLICE_FEATURES[key].default_value is not None:
        carry &= features[key] != _SLICE_FEATURES[key].default_value
    for combination in sorted(set(zip(*(features[key][carry] for key in keys)))):
      mask = carry.copy()
      for key, value in zip(keys, combination):
        mask &= features[key] == value
      masks[tuple(x for pair in zip(keys, combination) for x in pair)] = mask
  return masks


def direct_metrics(model_dir: str, examples_uri: str, num_bins: int) -> tuple:
  """(examples, {(output, slice): metrics}) of the serving signature called in this process
  and numpy's metrics."""
  serve = tf.saved_model.load(model_dir).signatures["serving_default"]
  files = sorted(f for split in SPLITS
                 for f in tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
  outputs, columns = collections.defaultdict(list), collections.defaultdict(list)
  for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH):
    predictions = serve(examples=serialized)
    for key in (PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY):
      outputs[key].append(predictions[key].numpy())
    for key, value in tf.io.parse_example(serialized, _SLICE_FEATURES).items():
      columns[key].append(value.numpy())
  features = {key: np.concatenate(values) for key, values in columns.items()}
  for key, feature in _SLICE_FEATURES.items():
    if feature.dtype == tf.string:
      features[key] = features[key].astype(str)
  masks = _slice_masks(features)
  metrics = {}
  for output, batches in outputs.items():
    probabilities = np.concatenate(batches)
    for slice_, mask in masks.items():
      metrics[(output, slice_)] = reference_metrics.metrics(probabilities[mask],
                                                        features["label"][mask], num_bins)
  return len(features["label"]), metrics


def build_parser():
  return harness.parser(__doc__, *FLAGS)


def main():
  parser = build_parser()
  args = parser.parse_args()
  if args.direct_runs < 1:
    parser.error("--direct_runs must be >= 1")
  config = from_preset().replace(output_dir=args.output_dir,
                                 beam_running_mode=args.beam_running_mode)
  model = RunRecord(config).candidate_model()
  if model is None:
    raise SystemExit(f"No trained model in {config.runner.metadata_path}; run `make run` first.")
  model_dir = os.path.join(model.uri, "Format-Serving")
  with tempfile.TemporaryDirectory() as work:
    examples_uri = os.path.join(work, "evaluation_set")
    count = build_evaluation_set(config, args.examples_per_corruption, examples_uri)
    print(f"Evaluation set: {count} examples; model {model_dir}", flush=True)
    direct_runs = [harness.timed(direct_metrics, model_dir, examples_uri,
                                 config.trainer.calibration.num_bins)
                   for _ in range(args.direct_runs)]
    assert all(run.value[0] == count for run in direct_runs)
    evaluator = harness.timed(run_evaluator, config, model.uri, examples_uri, work,
                              args.inference_batch_size)
    evaluator_time, evaluation_uri = evaluator.value
    tfma_values = tfma_results.load_metrics(evaluation_uri)
  direct_time = min(run.wall for run in direct_runs)
  direct = direct_runs[0].value[1]
  clean = ((evaluation_set.EVAL_SET_KEY, evaluation_set.EVAL),)
  mine = direct[(PROBABILITIES_KEY, ("eval_set", evaluation_set.EVAL))]
  print(f"\nclean eval, temperature-scaled: TFMA accuracy "
        f"{tfma_results.metric(tfma_values, clean, PROBABILITIES_KEY, ACCURACY_NAME):.6f} "
        f"ECE {tfma_results.metric(tfma_values, clean, PROBABILITIES_KEY, 'ece'):.6f} | numpy "
        f"accuracy {mine['accuracy']:.6f} ECE {mine['ece']:.6f}")
  print(harness.table(["path", "wall s", "examples/s", "CPU s"], [
      ("Evaluator component (TFMA, Beam)", f"{evaluator_time:.1f}",
       f"{count / evaluator_time:.1f}", f"{evaluator.cpu:.1f}"),
      (f"model call + numpy metrics ({len(direct)} slice x output metric sets; runs "
       f"{', '.join(f'{run.wall:.1f}' for run in direct_runs)} s)", f"{direct_time:.1f}",
       f"{count / direct_time:.1f}", ", ".join(f"{run.cpu:.1f}" for run in direct_runs))]))
  print(f"ratio Evaluator / direct: {direct_time / evaluator_time:.2f}x wall (the fastest direct "
        f"run), {min(run.cpu for run in direct_runs) / evaluator.cpu:.2f}x CPU; "
        f"{harness.load_average()}")


if __name__ == "__main__":
  main()
