"""One run of the trainer, in the mode its config asks for. The TFX Trainer (`trainer.run_fn`)
and the standalone `python -m trainer_module` on GPU/TPU workers both start here."""
import dataclasses
import logging
import math
import os
import shutil
import tempfile
from typing import Dict, Optional, Sequence

import tensorflow as tf
import tensorflow_transform as tft
from tensorboard.plugins.hparams import api as hparams_api

from trainer_module import data
from trainer_module.calibration import inputs, registry
from trainer_module.checkpoints import StopSignal
from trainer_module.config import TrainerConfig
from trainer_module.distribution import Precision, is_chief, make_strategy, precision_policy
from trainer_module.export import PRECISION_FILE, TRAINING_FILE, export_serving_model, float32_model
from trainer_module.training_loop import Training, fit

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunPaths:
  train_files: Sequence[str]  # Transform's transformed examples (file patterns).
  eval_files: Sequence[str]
  transform_output: str  # Transform's graph: the feature spec, and preprocessing at serving.
  checkpoint_dir: str  # Must outlive the process: a rerun resumes from here.
  log_dir: str  # TensorBoard summaries.
  export_dir: Optional[str] = None  # The serving SavedModel, when the mode trains.
  # A checkpoint or SavedModel to warm-start from (config.training.warm_start resolved), and what it
  # is a copy of (the production version), for the record.
  warm_start_from: Optional[str] = None
  warm_start_origin: Optional[str] = None


def run(config: TrainerConfig, paths: RunPaths,
        class_names: Optional[Sequence[str]] = None
        ) -> Dict[str, float]:  # pragma: no mutate block
  """Trains and/or evaluates as the config's mode says; returns the last metrics. class_names: what
  the served model names its classes (default: their indices). The precision policy the run
  trains in is the process's global Keras policy during the run only."""
  with precision_policy(config) as precision:
    return _run(config, paths, class_names, precision)


def _run(config: TrainerConfig, paths: RunPaths, class_names: Optional[Sequence[str]],
         precision: Precision) -> Dict[str, float]:  # pragma: no mutate block
  if config.distribution.op_determinism:
    tf.config.experimental.enable_op_determinism()
  strategy = make_strategy(config)
  chief = is_chief(strategy)
  tft_output = tft.TFTransformOutput(paths.transform_output)
  feature_spec = tft_output.transformed_feature_spec()
  global_batch_size = config.training.per_core_batch_size * strategy.num_replicas_in_sync
  num_train_examples = data.count_examples(paths.train_files)
  if num_train_examples < global_batch_size:
    raise ValueError(
        f"The train split has {num_train_examples} examples, fewer than one global "
        f"batch of {global_batch_size} (per_core_batch_size="
        f"{config.training.per_core_batch_size} x {strategy.num_replicas_in_sync} replicas).")
  config = config.for_train_examples(num_train_examples)
  training = Training(config, strategy, num_train_examples // global_batch_size,
                      paths.checkpoint_dir, chief, paths.warm_start_from,
                      paths.warm_start_origin)
  log.info("Checkpoints: %s", paths.checkpoint_dir)
  eval_batch_size = config.training.eval_batch_size * strategy.num_replicas_in_sync
  eval_dataset = None if config.training.mode == "train" else (
      strategy.distribute_datasets_from_function(lambda context: data.eval_batches(
          paths.eval_files, feature_spec, eval_batch_size, context)))
  subdir = "eval" if config.training.mode in ("eval", "continuous_eval") else "train"
  writer = (tf.summary.create_file_writer(os.path.join(paths.log_dir, subdir)) if chief
            else tf.summary.create_noop_writer())
  with writer.as_default():
    hparams_api.hparams(_hparams(config))

  if config.training.mode == "eval":
    if training.checkpoints.restore_latest() is None:
      raise FileNotFoundError(f"mode=eval: no checkpoint in {paths.checkpoint_dir}.")
    metrics = _evaluate_and_write(training, eval_dataset, writer)
  elif config.training.mode == "continuous_eval":
    metrics = _evaluate_continuously(training, eval_dataset, writer)
  else:
    metrics = _train_from_checkpoint(training, strategy, paths, feature_spec, config,
                                     global_batch_size, eval_dataset, writer)
  writer.flush()
  if not all(math.isfinite(value) for value in metrics.values()):
    raise FloatingPointError(f"Training diverged: final metrics {metrics}.")
  if paths.export_dir and config.training.mode in ("train", "train_and_eval"):
    # Post-hoc temperature scaling on the eval split (never test), on the float32 model that
    # is served, baked into the export.
    serving_model = float32_model(training.model, config)
    calibration = _calibrate(serving_model, config, tft_output,
                             data.eval_batches(paths.eval_files, feature_spec,
                                               config.training.eval_batch_size),
                             data.eval_batches(paths.train_files, feature_spec,
                                               config.training.eval_batch_size))
    _export(training, serving_model, tft_output, paths.export_dir, chief, calibration, precision,
            class_names)
  return metrics


def _train_from_checkpoint(training: Training, strategy, paths: RunPaths, feature_spec,
                           config: TrainerConfig, global_batch_size: int, eval_dataset,
                           writer) -> Dict[str, float]:
  """Resumes: restores the newest checkpoint (if any), starts the input past the examples its
  steps consumed, and trains from its step to the last; a checkpoint at the last step is only
  evaluated (with an eval split), never trained again."""
  training.restore()
  if training.step >= training.total_steps:
    log.info("The checkpoint is at the last step (%d): nothing left to train.",
             training.total_steps)
    return {} if eval_dataset is None else _evaluate_and_write(training, eval_dataset, writer)
  examples_seen = training.examples_seen
  train_dataset = strategy.distribute_datasets_from_function(
      lambda context: data.training_batches(paths.train_files, feature_spec, config,
                                            global_batch_size, examples_seen, context))
  with StopSignal() as stop_signal:
    return fit(training, train_dataset, eval_dataset, writer, stop_signal)


def _calibrate(model, config: TrainerConfig, tft_output, eval_batches,
               train_batches) -> dict:  # pragma: no mutate block
  """Post-hoc temperature scaling on the eval split (never test), by the method temperature_fit
  names (trainer_module/calibration/)."""
  method = registry.get(config.calibration.temperature_fit)
  return method.fit(
      model,
      inputs.held_out_sets(
          method, eval_batches, tft_output, config.calibration.validation_corruption_examples,
          config.training.eval_batch_size, train_batches),
      config.calibration.num_bins)


def _evaluate_and_write(training: Training, eval_dataset,
                        writer) -> Dict[str, float]:  # pragma: no mutate block
  metrics = {f"eval/{k}": v for k, v in training.evaluate(eval_dataset).items()}
  log.info("step %d  %s", training.step,
           "  ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
  with writer.as_default(step=training.step):
    for name, value in metrics.items():
      tf.summary.scalar(name, value)
  return metrics


def _evaluate_continuously(training: Training, eval_dataset,
                           writer) -> Dict[str, float]:  # pragma: no mutate block
  """Evaluates each new checkpoint as it appears, until the last step's (or a timeout)."""
  metrics = {}
  for path in tf.train.checkpoints_iterator(
      training.checkpoints.directory,
      timeout=training.config.training.continuous_eval_timeout_secs):
    if not training.checkpoints.restore(path):
      continue
    metrics = _evaluate_and_write(training, eval_dataset, writer)
    if training.step >= training.total_steps:
      break
  else:
    log.warning("No new checkpoint in %ds; stopping continuous evaluation.",
                training.config.training.continuous_eval_timeout_secs)
  return metrics


def _export(training: Training, model, tft_output, export_dir: str, chief: bool,
            calibration: dict, precision: Precision,
            class_names: Optional[Sequence[str]]) -> None:  # pragma: no mutate block
  """Every worker saves (saving may need collectives); only the chief's copy is kept."""
  target = export_dir if chief else tempfile.mkdtemp(prefix="export-scratch-")
  export_serving_model(model, tft_output, target, calibration=calibration, records={
      TRAINING_FILE: {"step": training.step, "trainer_config": training.config.to_dict(),
                      "warm_start": training.warm_start_record},
      PRECISION_FILE: dict(precision.to_dict(), serving_policy="float32")},
      class_names=class_names)
  if chief:
    log.info("Exported the serving model to %s.", export_dir)
  else:
    shutil.rmtree(target, ignore_errors=True)


def _hparams(config: TrainerConfig) -> dict:  # pragma: no mutate block
  """TensorBoard's hparams take scalars and strings only."""
  values = {}
  for name, value in config.to_dict().items():
    if isinstance(value, (list, tuple)):
      value = ",".join(str(v) for v in value)
    if value is not None:
      values[name] = value
  return values
