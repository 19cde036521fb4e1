"""One configuration object per run: defaults, plus overrides from flags, validated up front.

The local runner, the Kubeflow runner and the standalone trainer all take their values from
here (the trainer's part is `trainer_module.config.TrainerConfig`). Every flag is a field
name: `--dataset cifar10 --depth 28 --width_multiplier 10`.
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from typing import Any, Optional, Sequence, Tuple

from components import reference_corruptions
from kubeflow import object_storage
from kubeflow.config import KubeflowConfig, check_cluster_config, is_object_store_uri
from trainer_module.config import ENSEMBLE_OBJECTIVES, TrainerConfig, hyper_trials
from trainer_module.flags import parse_flags

DATASETS = ("digits", "cifar10", "tfrecord")
TFRECORD_SPLITS_REQUIRED = ("train", "eval")
DEFAULT_SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "components",
                                   "schema.pbtxt")
BEAM_RUNNING_MODES = ("auto", "multi_processing", "multi_threading", "in_memory")
# Examples in the embedded and tfds datasets (tfrecord inputs are not counted ahead of the run).
DATASET_EXAMPLES = {"digits": 1797, "cifar10": 60000}
MAX_PIPELINE_NAME_LENGTH = 100
# No path separators, and never '.' or '..': the name is a directory under output_dir.
PIPELINE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,%d}" %
                                   (MAX_PIPELINE_NAME_LENGTH - 1))


# AugMix in every pipeline preset (local and Kubeflow), in the configuration measured most
# robust within the time budget (README, AugMix). The standalone trainer keeps the original
# script's default: off.
PIPELINE_AUGMIX = {"augmix": True, "aug_count": 2, "augmix_view_sets": 4}


def _local_trainer() -> TrainerConfig:
  """A WRN-16-2 that trains on the embedded digits in a few minutes on two CPU cores."""
  return TrainerConfig(depth=16, width_multiplier=2, train_epochs=15, **PIPELINE_AUGMIX)


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  pipeline_name: str = "wrn_image_classifier"
  output_dir: str = "outputs"  # Pipeline root, MLMD database and serving models go here.
  # On Kubeflow (with `kubeflow` set) output_dir is on object storage: gs:// or s3://.
  dataset: str = "digits"  # digits (embedded), cifar10 (tensorflow-datasets) or tfrecord.
  tfrecord_dir: Optional[str] = None  # With dataset=tfrecord: holds train/, eval/ [, test/].
  tfds_data_dir: Optional[str] = None  # tensorflow-datasets cache; None is tfds' default.
  eval_fraction: float = 0.15  # Share of keys held out for evaluation (model selection).
  test_fraction: float = 0.15  # Share of digits keys held out for the final test only.
  schema_path: str = DEFAULT_SCHEMA_PATH
  min_eval_accuracy: float = 0.9  # Evaluator blesses no model below this eval accuracy.
  max_accuracy_drop: float = 0.01  # ... nor one this much less accurate than the last blessed.
  # The rest of the gate (evaluation branch): calibrated eval ECE and NLL, mean corrupted
  # accuracy, each bounded and allowed to regress at most this much against the last blessed.
  # 0.10: the default model is under-confident on clean images (raw ECE 0.07-0.08), and the
  # default temperature fit will not sharpen it at the cost of calibration under shift.
  max_eval_ece: float = 0.10
  max_ece_increase: float = 0.02
  max_eval_nll: float = 0.3
  max_nll_increase: float = 0.1
  min_corrupted_accuracy: float = 0.5
  max_corrupted_accuracy_drop: float = 0.03
  # Calibration under shift (calibrated probabilities, the whole corrupted set): NLL (equal
  # slices make it cNLL) and ECE, bounded and allowed to regress at most this much. The bounds
  # hold the default model with a margin (two runs on the digits with the 15 reference
  # corruptions, T = 1 from temperature_fit=validation_corruptions: cNLL 1.48 and 1.56, ECE of
  # the corrupted set 0.083 and 0.065).
  max_corrupted_nll: float = 2.0
  max_corrupted_nll_increase: float = 0.2
  max_corrupted_ece: float = 0.15
  max_corrupted_ece_increase: float = 0.03
  # Robustness set: these corruptions x severities 1-5 of the test images (cifar10: tfds'
  # cifar10_corrupted; others: made with tfds' corruption code). Default: the 15 benchmark
  # corruptions. Empty: none. Each corruption x severity slice holds examples_per_corruption
  # test images (the same ones in every slice; 0: all of them).
  corruptions: Tuple[str, ...] = reference_corruptions.BENCHMARK_CORRUPTIONS
  examples_per_corruption: int = 100
  # Processes making the generated corruptions; 0 = one per core when the slow corruptions
  # have enough images to pay for the start-up (components/reference_corruptions.py).
  corruption_workers: int = 0
  # Hyper-deep ensemble: hyper_trials Trainers (trial 0 with the trainer config, the others
  # with drawn L2s, label smoothing and seed), of which greedy selection on the eval split keeps
  # at most ensemble_size distinct members. 1 and 1: one Trainer, no ensemble.
  ensemble_size: int = 1
  hyper_trials: int = 1
  ensemble_objective: str = "nll"  # nll, acc or nll-acc (what selection optimises).
  enable_cache: bool = True
  beam_workers: int = 0  # Beam DirectRunner workers; 0 = one per CPU core.
  # auto: a Beam step whose input has at most beam_in_memory_max_examples examples (Transform:
  # images, AugMix views included) runs in_memory in one process (starting worker processes,
  # each importing TensorFlow and TFX, costs more than they save on small data: measured with
  # bench/beam_modes.py); bigger or uncounted inputs multi_processing.
  beam_running_mode: str = "auto"
  beam_in_memory_max_examples: int = 10000
  trainer: TrainerConfig = dataclasses.field(default_factory=_local_trainer)
  kubeflow: Optional[KubeflowConfig] = None  # Cluster settings; None for a local run.

  def __post_init__(self):
    _require(bool(self.output_dir.strip()), "output_dir", self.output_dir, "must not be empty")
    if self.kubeflow is None:
      object.__setattr__(self, "output_dir", os.path.abspath(self.output_dir))
    _require(self.dataset in DATASETS, "dataset", self.dataset, f"must be one of {DATASETS}")
    _require(PIPELINE_NAME_PATTERN.fullmatch(self.pipeline_name) is not None, "pipeline_name",
             self.pipeline_name, f"must be 1-{MAX_PIPELINE_NAME_LENGTH} letters, digits, '_', "
             "'-' or '.', starting with a letter or digit (it names directories and MLMD "
             "contexts)")
    _require(0.0 < self.eval_fraction < 1.0, "eval_fraction", self.eval_fraction,
             "must be in (0, 1)")
    _require(0.0 <= self.test_fraction < 1.0 - self.eval_fraction, "test_fraction",
             self.test_fraction, "must be in [0, 1 - eval_fraction)")
    _require(0.0 <= self.min_eval_accuracy <= 1.0, "min_eval_accuracy", self.min_eval_accuracy,
             "must be in [0, 1]")
    for name in ("max_accuracy_drop", "max_eval_ece", "max_ece_increase", "max_eval_nll",
                 "max_nll_increase", "max_corrupted_accuracy_drop", "max_corrupted_nll",
                 "max_corrupted_nll_increase", "max_corrupted_ece", "max_corrupted_ece_increase"):
      _require(getattr(self, name) >= 0.0, name, getattr(self, name), "must be >= 0")
    _require(0.0 <= self.min_corrupted_accuracy <= 1.0, "min_corrupted_accuracy",
             self.min_corrupted_accuracy, "must be in [0, 1]")
    _require(self.examples_per_corruption >= 0, "examples_per_corruption",
             self.examples_per_corruption, "must be >= 0 (0 = every test image)")
    _require(self.corruption_workers >= 0, "corruption_workers", self.corruption_workers,
             "must be >= 0 (0 = one per core when that pays)")
    _require(self.ensemble_size >= 1, "ensemble_size", self.ensemble_size, "must be >= 1")
    _require(self.hyper_trials >= self.ensemble_size, "hyper_trials", self.hyper_trials,
             f"must be >= ensemble_size ({self.ensemble_size}): the ensemble's members are "
             "chosen among the trials")
    _require(self.ensemble_objective in ENSEMBLE_OBJECTIVES, "ensemble_objective",
             self.ensemble_objective, f"must be one of {ENSEMBLE_OBJECTIVES}")
    _require(self.beam_workers >= 0, "beam_workers", self.beam_workers,
             "must be >= 0 (0 = one per CPU core)")
    _require(self.beam_running_mode in BEAM_RUNNING_MODES, "beam_running_mode",
             self.beam_running_mode, f"must be one of {BEAM_RUNNING_MODES}")
    _require(self.beam_in_memory_max_examples >= 0, "beam_in_memory_max_examples",
             self.beam_in_memory_max_examples, "must be >= 0")
    if self.dataset != "tfrecord":
      _require(self.tfrecord_dir is None, "tfrecord_dir", self.tfrecord_dir,
               "is only used with dataset=tfrecord")
    if self.kubeflow is not None:
      _require(self.dataset != "tfrecord" or bool(self.tfrecord_dir), "tfrecord_dir",
               self.tfrecord_dir, "is required with dataset=tfrecord")
      check_cluster_config(self)  # Paths on object storage are not read here.
    elif self.dataset == "tfrecord":
      _check_tfrecord_dir(self.tfrecord_dir)
    if self.kubeflow is None or not is_object_store_uri(self.schema_path):
      _check_schema(self.schema_path, self.trainer.num_classes)
    _check_corruptions(self.corruptions, self.dataset, self.tfrecord_dir)
    if self.trainer.temperature_fit == "validation_corruptions":
      tuning = [name for name in self.corruptions
                if name in reference_corruptions.EXTRA_CORRUPTIONS]
      _require(not tuning, "corruptions", ",".join(self.corruptions),
               f"{tuning} choose the temperature (temperature_fit=validation_corruptions), so "
               "they cannot also be evaluated; leave them out or pick another temperature_fit")
    _require(self.trainer.mode == "train_and_eval", "mode", self.trainer.mode,
             "the pipeline's Trainer trains and evaluates (other modes are for the standalone "
             "`python -m trainer_module`)")

  def check_output_dir(self) -> None:
    """For a local run: output_dir must be a directory this user can create files in, or be
    creatable; checked without writing (a probe file would be a write). The runner calls it,
    not the constructor: it depends on who runs where, and a config built only to compile for
    a cluster writes nothing locally."""
    path = self.output_dir
    _require(not os.path.exists(path) or os.path.isdir(path), "output_dir", path,
             "is a file, not a directory")
    existing = path
    while not os.path.exists(existing):
      existing = os.path.dirname(existing)
    _require(os.path.isdir(existing), "output_dir", path,
             f"cannot be created: {existing} is a file")
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
      _require(False, "output_dir", path, f"is not writable: {existing} is on a read-only file "
               "system")
    _require(os.access(existing, os.W_OK | os.X_OK), "output_dir", path,
             f"is not writable: this user may not create files in {existing}")

  @property
  def trials(self) -> Tuple[TrainerConfig, ...]:
    """The trial Trainers' configs (one, the trainer config, without an ensemble)."""
    return tuple(hyper_trials(self.trainer, self.hyper_trials))

  # Where a run's outputs live.
  @property
  def pipeline_root(self) -> str:
    return os.path.join(self.output_dir, "pipeline_root", self.pipeline_name)

  @property
  def metadata_path(self) -> str:
    return os.path.join(self.output_dir, "metadata", self.pipeline_name, "metadata.sqlite")

  @property
  def serving_model_dir(self) -> str:
    return os.path.join(self.output_dir, "serving_model", self.pipeline_name)

  @property
  def uses_s3(self) -> bool:
    return any(isinstance(path, str) and path.startswith("s3://") for path in
               (self.output_dir, self.tfrecord_dir, self.tfds_data_dir, self.schema_path))

  @property
  def input_examples(self) -> Optional[int]:
    """Examples of the input dataset, when known without reading it."""
    return DATASET_EXAMPLES.get(self.dataset)

  def beam_step_args(self, examples: Optional[int]) -> list:
    """What a Beam step adds to beam_pipeline_args() for an input of `examples` (TFX puts a
    step's arguments after the pipeline's, and Beam keeps a repeated flag's last value): the
    engine auto picks for that size on a local run; nothing otherwise."""
    if self.beam_running_mode != "auto" or self.kubeflow is not None:
      return []
    return [arg for arg in self.beam_pipeline_args(examples) if arg.startswith("--direct_")]

  def beam_pipeline_args(self, examples: Optional[int] = None) -> list:
    """A Beam step's arguments: the engine, and s3:// set up in each SDK worker. `examples`:
    the size of the step's input, when known (beam_running_mode=auto picks by it)."""
    s3_workers = [f"--beam_plugin={object_storage.BEAM_PLUGIN}"] if self.uses_s3 else []
    if self.kubeflow and self.kubeflow.beam_runner != "direct":
      return self.kubeflow.beam_runner_args() + s3_workers
    mode = self.beam_running_mode
    if mode == "auto":
      small = examples is not None and examples <= self.beam_in_memory_max_examples
      mode = "in_memory" if small and self.kubeflow is None else "multi_processing"
    # In a cluster, 0 tells Beam to use the cores of the machine the component runs on.
    workers = 1 if mode == "in_memory" else (
        self.beam_workers or (0 if self.kubeflow else os.cpu_count() or 1))
    return [f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"] + s3_workers

  def replace(self, **overrides) -> "PipelineConfig":
    """A copy with overrides; trainer and cluster fields may be given by name alongside
    pipeline fields (a cluster field turns a local config into a cluster one)."""
    pipeline_fields = {f.name for f in dataclasses.fields(PipelineConfig)}
    trainer_fields = {f.name for f in dataclasses.fields(TrainerConfig)}
    kubeflow_fields = {f.name for f in dataclasses.fields(KubeflowConfig)}
    unknown = set(overrides) - pipeline_fields - trainer_fields - kubeflow_fields
    if unknown:
      raise ValueError(f"Unknown config field(s): {sorted(unknown)}.")
    trainer_overrides = {k: v for k, v in overrides.items() if k in trainer_fields}
    kubeflow_overrides = {k: v for k, v in overrides.items() if k in kubeflow_fields}
    pipeline_overrides = {k: v for k, v in overrides.items() if k in pipeline_fields}
    trainer = pipeline_overrides.pop("trainer", self.trainer)
    if trainer_overrides:
      trainer = dataclasses.replace(trainer, **trainer_overrides)
    kubeflow = pipeline_overrides.pop("kubeflow", self.kubeflow)
    if kubeflow_overrides:
      kubeflow = (dataclasses.replace(kubeflow, **kubeflow_overrides) if kubeflow
                  else KubeflowConfig(**kubeflow_overrides))
    return dataclasses.replace(self, trainer=trainer, kubeflow=kubeflow, **pipeline_overrides)


def _flag_fields() -> dict:
  fields = {f.name: f for f in dataclasses.fields(PipelineConfig)
            if f.name not in ("trainer", "kubeflow")}
  fields.update({f.name: f for f in dataclasses.fields(TrainerConfig)})
  fields.update({f.name: f for f in dataclasses.fields(KubeflowConfig)})
  return fields


def usage(base: Optional[PipelineConfig] = None,
          command: str = 'python -m pipeline [--flag=value ...]   (or: make run ARGS="--flag=value")',
          cluster: bool = False) -> str:
  """Every flag with its default (trainer defaults are the base's; cluster flags on request)."""
  defaults = base or PipelineConfig()
  cluster_defaults = {f.name: f.default for f in dataclasses.fields(KubeflowConfig)}
  lines = [f"usage: {command}", ""]
  for name in _flag_fields():
    if name in cluster_defaults:
      if cluster:
        lines.append(f"  --{name:<22} default: {cluster_defaults[name]!r}")
      continue
    source = defaults.trainer if hasattr(defaults.trainer, name) else defaults
    lines.append(f"  --{name:<22} default: {getattr(source, name)!r}")
  return "\n".join(lines)


def from_flags(argv: Sequence[str], base: Optional[PipelineConfig] = None) -> PipelineConfig:
  """Builds the run's config from `--field value` / `--field=value` flags over the defaults."""
  hints = {**typing.get_type_hints(PipelineConfig), **typing.get_type_hints(TrainerConfig),
           **typing.get_type_hints(KubeflowConfig)}
  hints = {name: hints[name] for name in _flag_fields()}
  return (base or PipelineConfig()).replace(**parse_flags(argv, hints))


def _check_tfrecord_dir(path: Optional[str]) -> None:
  _require(bool(path), "tfrecord_dir", path, "is required with dataset=tfrecord")
  _require(os.path.isdir(path), "tfrecord_dir", path, "is not a directory")
  for split in TFRECORD_SPLITS_REQUIRED:
    split_dir = os.path.join(path, split)
    _require(os.path.isdir(split_dir) and bool(os.listdir(split_dir)), "tfrecord_dir", path,
             f"has no TFRecord files in {split_dir} (expected {'/, '.join(TFRECORD_SPLITS_REQUIRED)}/"
             " and optionally test/ subdirectories)")


def robustness_source(dataset: str) -> str:
  """Where corrupted images come from: CIFAR-10-C for cifar10, generated for the others."""
  return "cifar10_corrupted" if dataset == "cifar10" else "generated"


def _check_corruptions(names: Tuple[str, ...], dataset: str, tfrecord_dir: Optional[str]) -> None:
  known = reference_corruptions.ALL_CORRUPTIONS
  unknown = [name for name in names if name not in known]
  _require(not unknown, "corruptions", ",".join(names),
           f"{unknown} unknown; known: {','.join(known)} (or empty for no robustness set)")
  _require(len(set(names)) == len(names), "corruptions", ",".join(names), "lists a name twice")

  if names and dataset == "tfrecord" and tfrecord_dir and os.path.isdir(tfrecord_dir):
    _require(os.path.isdir(os.path.join(tfrecord_dir, "test")), "corruptions", ",".join(names),
             f"needs test images to corrupt, and {tfrecord_dir} has no test/ directory; add one "
             "or pass --corruptions= (no robustness set)")


def check_runs_here(config: PipelineConfig) -> None:
  """For a local run: every generated corruption can run on this machine (on Kubeflow they
  run in the pipeline's image, which has what they need)."""
  if robustness_source(config.dataset) != "generated":
    return
  missing = reference_corruptions.unavailable(config.corruptions)
  _require(not missing, "corruptions", ",".join(config.corruptions), "; ".join(
      f"{name} cannot run on this machine: it {reason}" for name, reason in missing.items())
           + " (or leave it out of --corruptions)")


def _check_schema(path: str, num_classes: int) -> None:
  """The curated schema must exist and bound the label to [0, num_classes)."""
  from google.protobuf import text_format
  from tensorflow_metadata.proto.v0 import schema_pb2
  _require(os.path.isfile(path), "schema_path", path, "does not exist")
  schema = schema_pb2.Schema()
  with open(path) as f:
    try:
      text_format.Parse(f.read(), schema)
    except text_format.ParseError as error:
      raise ValueError(f"Invalid config value schema_path={path!r}: not a schema: {error}") from None
  label = next((f for f in schema.feature if f.name == "label"), None)
  _require(label is not None and label.HasField("int_domain"), "schema_path", path,
           "must give the 'label' feature an int_domain")
  _require(label.int_domain.min == 0 and label.int_domain.max == num_classes - 1, "num_classes",
           num_classes, f"disagrees with the label domain [{label.int_domain.min}, "
           f"{label.int_domain.max}] of {path}")


def _require(condition: bool, name: str, value: Any, rule: str) -> None:
  if not condition:
    raise ValueError(f"Invalid config value {name}={value!r}: {rule}.")
