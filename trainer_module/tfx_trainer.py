"""The TFX Trainer entry point (`run_fn`): Transform's output in, serving SavedModel out, by the
standalone trainer's code, with checkpoints a retried execution resumes from and the classes
named by the run's schema. docs/standalone_trainer.md, "Where the pipeline's Trainer
keeps checkpoints".
"""
import hashlib
import json
import logging
import os
from typing import Optional, Tuple

import tensorflow as tf

from trainer_module.class_names import read_class_names
from trainer_module.config import (NO_WARM_START, TRAINER_CONFIG_KEY, WARM_START_FROM_PRODUCTION,
                                   TrainerConfig)
from trainer_module.features import PUSH_INFO_PATH
from trainer_module.training_job import RunPaths, run

log = logging.getLogger(__name__)


def checkpoint_dir(fn_args, config: TrainerConfig) -> str:
  """A directory that depends on what is trained, not on which execution trains it."""
  identity = json.dumps({"train": sorted(fn_args.train_files),
                         "eval": sorted(fn_args.eval_files),
                         "transform": fn_args.transform_output,
                         "trainer": config.to_dict(),
                         "custom_config": fn_args.custom_config,
                         "base_model": fn_args.base_model}, sort_keys=True)
  key = hashlib.sha256(identity.encode()).hexdigest()[:16]
  trainer_root = os.path.dirname(os.path.dirname(fn_args.model_run_dir))  # <root>/Trainer
  return os.path.join(trainer_root, "checkpoints", key)


def warm_start_source(config: TrainerConfig, base_model: Optional[str]
                      ) -> Tuple[Optional[str], Optional[str]]:
  """(what to warm-start from, what it is a copy of) for config.training.warm_start."""
  if config.training.warm_start == NO_WARM_START:
    return None, None
  if config.training.warm_start != WARM_START_FROM_PRODUCTION:
    return config.training.warm_start, None
  if not base_model or not tf.io.gfile.exists(os.path.join(base_model, "saved_model.pb")):
    log.info("warm_start=production: no model in production yet; training from scratch on "
             "the full schedule.")
    return None, None
  origin = "the model in production"
  push_info = os.path.join(base_model, PUSH_INFO_PATH)
  if tf.io.gfile.exists(push_info):
    with tf.io.gfile.GFile(push_info) as f:
      origin += f" (fingerprint {json.load(f).get('model_fingerprint')})"
  return base_model, f"{origin}, snapshot {base_model}"


def run_fn(fn_args) -> None:
  config = TrainerConfig.from_dict(fn_args.custom_config[TRAINER_CONFIG_KEY])
  class_names = read_class_names(fn_args.schema_path) if fn_args.schema_path else None
  if class_names and len(class_names) != config.model.num_classes:
    log.info("The schema names %d classes: the model gets %d outputs (num_classes=%d ignored).",
             len(class_names), len(class_names), config.model.num_classes)
    config = config.replace(num_classes=len(class_names))
  warm_start_from, warm_start_origin = warm_start_source(config, fn_args.base_model)
  run(config, RunPaths(train_files=fn_args.train_files, eval_files=fn_args.eval_files,
                       transform_output=fn_args.transform_output,
                       checkpoint_dir=checkpoint_dir(fn_args, config),
                       log_dir=fn_args.model_run_dir, export_dir=fn_args.serving_model_dir,
                       warm_start_from=warm_start_from, warm_start_origin=warm_start_origin),
      class_names)
