"""`python -m trainer_module`: the trainer on its own, as GPU/TPU workers run it; its `ensemble`
command selects and exports an ensemble of models trained elsewhere, and `inspect PATH` prints
a checkpoint's or SavedModel's variables and record. Usage: docs/standalone_trainer.md.
"""
import dataclasses
import logging
import os
import sys
import typing
from typing import Optional, Tuple

from absl import logging as absl_logging

from trainer_module import ensemble
from trainer_module.checkpoints import Preempted
from trainer_module import warm_start
from trainer_module.config import (DEFAULT_ENSEMBLE_OBJECTIVE, ENSEMBLE_OBJECTIVES,
                                   NO_WARM_START, WARM_START_FROM_PRODUCTION, CalibrationConfig,
                                   TrainerConfig, TrainingConfig)
from configs.flags import (config_sections, describe_flags, field_help, parse_config_flags,
                           parse_flags)
from trainer_module.training_job import RunPaths, run


@dataclasses.dataclass(frozen=True)
class StandalonePaths:
  train_files: Tuple[str, ...] = ()  # Comma-separated file patterns of Transform's output.
  eval_files: Tuple[str, ...] = ()  # The same, of the eval split.
  transform_output: str = ""  # Transform's transform_graph directory.
  output_dir: str = ""  # checkpoints/, logs/ and serving_model/ go here.
  checkpoint_dir: Optional[str] = None  # Default: <output_dir>/checkpoints.

  def run_paths(self, config: TrainerConfig) -> RunPaths:
    for name in ("train_files", "eval_files", "transform_output", "output_dir"):
      if not getattr(self, name):
        raise ValueError(f"--{name} is required.")
    if config.training.warm_start == WARM_START_FROM_PRODUCTION:
      raise ValueError(
          f"Invalid config value warm_start={config.training.warm_start!r}: production is "
          "a pipeline setting; give the trainer a checkpoint directory or an "
          "exported SavedModel.")
    self.check_inputs_exist(config)
    return RunPaths(train_files=self.train_files, eval_files=self.eval_files,
                    transform_output=self.transform_output,
                    checkpoint_dir=self.checkpoint_dir or os.path.join(self.output_dir,
                                                                       "checkpoints"),
                    log_dir=os.path.join(self.output_dir, "logs"),
                    export_dir=os.path.join(self.output_dir, "serving_model"),
                    warm_start_from=(None if config.training.warm_start == NO_WARM_START
                                     else config.training.warm_start))

  def check_inputs_exist(self, config: TrainerConfig) -> None:
    """Every path the flags name for reading is there, checked before any work."""
    import tensorflow as tf
    for name in ("train_files", "eval_files"):
      for pattern in getattr(self, name):
        if not tf.io.gfile.glob(pattern):
          raise ValueError(f"Invalid config value {name}={pattern!r}: matches no file.")
    if not tf.io.gfile.isdir(self.transform_output):
      raise ValueError(f"Invalid config value transform_output={self.transform_output!r}: is "
                       "not a directory (Transform's transform_graph output).")
    if config.training.warm_start != NO_WARM_START:
      try:
        warm_start.check_source(config.training.warm_start, config.to_dict())
      except warm_start.WarmStartError as error:
        raise ValueError(f"Invalid config value {error}") from None


# The --help texts' heads: each command and what it writes.
TRAIN_USAGE = """`python -m trainer_module --train_files=... --eval_files=... --transform_output=...
--output_dir=... [--<trainer config field>=value ...]`: the trainer on its own, as GPU/TPU
workers run it. Flags are TrainerConfig's fields (the original script's names) plus the paths;
--warm_start is a checkpoint directory or exported SavedModel here (production is the
pipeline's). Outputs: <output_dir>/checkpoints (resumed from on restart), /logs (TensorBoard),
/serving_model.
"""
ENSEMBLE_USAGE = """`python -m trainer_module ensemble --members=DIR,DIR,... --eval_files=...
--train_files=... --transform_output=... --output_dir=... [--ensemble_size=4]`: the pipeline's
hyper-deep ensemble selection and export over member models trained elsewhere (each DIR a
serving_model this command wrote), with the pipeline's defaults; the ensemble goes to
<output_dir>/serving_model.
"""
INSPECT_USAGE = """`python -m trainer_module inspect PATH`: the variables (name, shape, dtype) of a
checkpoint (directory or prefix) or SavedModel, and the step, config and warm start it was
written with.
"""
COMMAND_HELP = "`ensemble --help` (with its flags), `inspect --help`: that command's usage.\n"


def usage() -> str:
  """The commands, then every flag of the trainer, grouped, with its default and meaning."""
  helps = field_help(StandalonePaths)
  paths = [(f.name, f.default, helps[f.name]) for f in dataclasses.fields(StandalonePaths)]
  return "\n".join((TRAIN_USAGE, ENSEMBLE_USAGE, INSPECT_USAGE, COMMAND_HELP)) + describe_flags(
      [("paths", paths)] + config_sections(TrainerConfig(), TrainerConfig))


def parse(argv) -> Tuple[TrainerConfig, RunPaths]:
  path_hints = typing.get_type_hints(StandalonePaths)
  values = parse_config_flags(argv, TrainerConfig, path_hints)
  paths = StandalonePaths(**{k: v for k, v in values.items() if k in path_hints})
  config = TrainerConfig.from_dict({k: v for k, v in values.items() if k not in path_hints})
  return config, paths.run_paths(config)


@dataclasses.dataclass(frozen=True)
class EnsembleFlags:
  """The ensemble command's flags (`ensemble_usage`: their help)."""
  members: Tuple[str, ...] = ()  # Comma-separated serving_model directories of the members.
  eval_files: Tuple[str, ...] = ()  # Transform's eval split: selection and temperature.
  train_files: Tuple[str, ...] = ()  # Transform's train split, feature distances' reference.
  transform_output: str = ""
  output_dir: str = ""  # The ensemble's serving_model/ goes here.
  ensemble_size: int = 4  # Selection stops at this many distinct members (picks may repeat).
  # Greedy selection's objective on the eval split; shift_nll adds the NLL of each validation
  # corruption x severity slice.
  ensemble_objective: str = DEFAULT_ENSEMBLE_OBJECTIVE  # nll, acc, nll-acc or shift_nll.
  eval_batch_size: int = TrainingConfig.eval_batch_size
  num_bins: int = CalibrationConfig.num_bins
  # distance_detail_curve needs train_files.
  temperature_fit: str = CalibrationConfig.temperature_fit  # The ensemble's T, as one model's.
  validation_corruption_examples: int = CalibrationConfig.validation_corruption_examples

  def __post_init__(self):
    for name in ("members", "eval_files", "transform_output", "output_dir"):
      if not getattr(self, name):
        raise ValueError(f"--{name} is required.")
    if self.ensemble_size < 1:
      raise ValueError(f"Invalid config value ensemble_size={self.ensemble_size}: must be >= 1.")
    if self.ensemble_objective not in ENSEMBLE_OBJECTIVES:
      raise ValueError(f"Invalid config value ensemble_objective={self.ensemble_objective!r}: "
                       f"must be one of {ENSEMBLE_OBJECTIVES}.")


def ensemble_usage() -> str:
  """ENSEMBLE_USAGE, then each of the command's flags with its default and meaning: its comment
  in EnsembleFlags, then the help of the trainer's field of that name; a path without a comment
  has the standalone trainer's help of that path."""
  trainer = {name: text for _, flags in config_sections(TrainerConfig(), TrainerConfig)
             for name, _, text in flags}
  own, paths = field_help(EnsembleFlags), field_help(StandalonePaths)
  flags = [(f.name, f.default, " ".join(filter(None, (own[f.name], trainer.get(f.name))))
            or paths.get(f.name, "")) for f in dataclasses.fields(EnsembleFlags)]
  return ENSEMBLE_USAGE + describe_flags([("flags", flags)])


def ensemble_main(argv) -> int:
  if _wants_help(argv):
    print(ensemble_usage())
    return 0
  try:
    flags = EnsembleFlags(**parse_flags(argv, typing.get_type_hints(EnsembleFlags)))
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  _configure_logging()
  members = [ensemble.Member(name=d, model_dir=d) for d in flags.members]
  try:
    record = ensemble.build_ensemble(
        members, flags.eval_files, flags.transform_output,
        os.path.join(flags.output_dir, "serving_model"), flags.ensemble_size,
        objective=flags.ensemble_objective, eval_batch_size=flags.eval_batch_size,
        num_bins=flags.num_bins, temperature_fit=flags.temperature_fit,
        validation_corruption_examples=flags.validation_corruption_examples,
        train_files=flags.train_files)
  except (FileNotFoundError, ValueError) as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  logging.info("Ensemble of %s, eval %s.", ", ".join(
      f"{m['name']} x{m['weight']:.3f}" for m in record["members"]),
      "  ".join(f"{k} {v:.4f}" for k, v in record["eval"].items()))
  return 0


def _configure_logging() -> None:
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
  absl_logging.set_verbosity(absl_logging.WARNING)


def inspect_main(argv) -> int:
  if _wants_help(argv):
    print(INSPECT_USAGE, end="")
    return 0
  unknown = [arg for arg in argv if arg.startswith("-")]
  if unknown or len(argv) != 1:
    print("error: " + (f"Unknown argument {', '.join(unknown)}. " if unknown else "")
          + "Usage: python -m trainer_module inspect PATH", file=sys.stderr)
    return 2
  try:
    print(warm_start.inspect(argv[0]))
  except warm_start.WarmStartError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  return 0


def _wants_help(argv) -> bool:
  return "--help" in argv or "-h" in argv


def main(argv) -> int:
  if argv[:1] == ["ensemble"]:
    return ensemble_main(argv[1:])
  if argv[:1] == ["inspect"]:
    return inspect_main(argv[1:])
  if _wants_help(argv):
    print(usage())
    return 0
  try:
    config, paths = parse(argv)
  except ValueError as error:
    print(f"error: {error}", file=sys.stderr)
    return 2
  _configure_logging()
  try:
    metrics = run(config, paths)
  except Preempted as stopped:
    logging.warning("%s", stopped)
    return 143  # 128 + SIGTERM: what a scheduler expects from a preempted task.
  except warm_start.WarmStartError as error:
    logging.error("%s", error)
    return 2
  logging.info("Done: %s", "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
