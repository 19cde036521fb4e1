"""The TFX Trainer entry point (`run_fn`): Transform's output in, serving SavedModel out."""
import logging
import math

import tensorflow_transform as tft
import tf_keras as keras

from trainer_module import data
from trainer_module.config import TrainerConfig
from trainer_module.export import export_serving_model
from trainer_module.model import wide_resnet
from trainer_module.temperature import calibrate
from trainer_module.train import train_model

log = logging.getLogger(__name__)


def run_fn(fn_args) -> None:
  config = TrainerConfig.from_dict(fn_args.custom_config["trainer"])
  tft_output = tft.TFTransformOutput(fn_args.transform_output)
  feature_spec = tft_output.transformed_feature_spec()
  num_train_examples = data.count_examples(fn_args.train_files)
  if num_train_examples < config.per_core_batch_size:
    raise ValueError(f"The train split has {num_train_examples} examples, fewer than one batch "
                     f"of per_core_batch_size={config.per_core_batch_size}.")
  steps_per_epoch = num_train_examples // config.per_core_batch_size
  train_data = data.training_batches(fn_args.train_files, feature_spec, config)
  eval_data = data.eval_batches(fn_args.eval_files, feature_spec, config.eval_batch_size)
  keras.utils.set_random_seed(config.seed)
  model = wide_resnet(config)
  metrics = train_model(config, model, train_data, eval_data, steps_per_epoch,
                        log_dir=fn_args.model_run_dir)
  if not all(math.isfinite(v) for v in metrics.values()):
    raise FloatingPointError(f"Training diverged: final eval metrics {metrics}.")
  calibration = calibrate(model, eval_data)  # Post-hoc temperature scaling on the eval split.
  export_serving_model(model, tft_output, fn_args.serving_model_dir, calibration=calibration)
  log.info("Exported the serving model to %s.", fn_args.serving_model_dir)
