"""The TFX Trainer entry point (`run_fn`): Transform's output in, serving SavedModel out.

It runs the same code as `python -m trainer_module` (task.run). Checkpoints go to
`<pipeline_root>/Trainer/checkpoints/<key>`, where the key hashes the run's inputs (Transform's
output URIs) and trainer config: a retried Trainer execution (which gets a new output
directory) finds the checkpoints of the attempt it replaces and resumes at the step it reached.
"""
import hashlib
import json
import os

from trainer_module.config import TrainerConfig
from trainer_module.task import RunPaths, run


def checkpoint_dir(fn_args, config: TrainerConfig) -> str:
  """A directory that depends on what is trained, not on which execution trains it."""
  identity = json.dumps({"train": sorted(fn_args.train_files),
                         "eval": sorted(fn_args.eval_files),
                         "transform": fn_args.transform_output,
                         "trainer": config.to_dict(),
                         "custom_config": fn_args.custom_config}, sort_keys=True)
  key = hashlib.sha256(identity.encode()).hexdigest()[:16]
  trainer_root = os.path.dirname(os.path.dirname(fn_args.model_run_dir))  # <root>/Trainer
  return os.path.join(trainer_root, "checkpoints", key)


def run_fn(fn_args) -> None:
  config = TrainerConfig.from_dict(fn_args.custom_config["trainer"])
  run(config, RunPaths(train_files=fn_args.train_files, eval_files=fn_args.eval_files,
                       transform_output=fn_args.transform_output,
                       checkpoint_dir=checkpoint_dir(fn_args, config),
                       log_dir=fn_args.model_run_dir, export_dir=fn_args.serving_model_dir))
