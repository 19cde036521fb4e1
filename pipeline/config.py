"""One configuration object per run: a preset (configs/) with flags over it, validated once,
as a local run needs it; a Kubeflow run's config (kubeflow/cluster_config.py) extends it.
Every flag is a field name: `--config=wrn28_10_cifar10 --train_epochs=50`.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional, Sequence, Tuple

import configs
from components import spans, tfrecord_check
from trainer_module import reference_corruptions
from trainer_module.class_names import DATASET_CLASS_NAMES, index_names
from pipeline import beam_engine
from configs import groups
from configs.flags import (CONFIG_HELP, config_sections, describe_flags, name_value_pairs,
                           parse_config_flags)
from storage import object_storage
from storage.object_storage import is_object_store_uri
from trainer_module.calibration import registry as calibration_methods
from trainer_module.config import (DEFAULT_ENSEMBLE_OBJECTIVE, ENSEMBLE_OBJECTIVES,
                                   NO_WARM_START, WARM_START_FROM_PRODUCTION, TrainerConfig,
                                   hyper_trials, require, require_finite)

DATASETS = ("digits", "cifar10", "tfrecord", "image_dir")
TFRECORD_SPLITS_REQUIRED = ("train", "eval")
DEFAULT_SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "components",
                                   "schema.pbtxt")
BEAM_RUNNING_MODES = ("auto", "multi_processing", "multi_threading", "in_memory")
# What this environment (and the pipeline's image) was installed from. Given to a DirectRunner
# step (which stages nothing: its SDK workers run beside it), it stops TFX from copying its own
# install tree to a temporary directory and building an sdist of it at the start of every Beam
# step, for an --extra_package no worker would install (tfx/utils/dependency_utils.py,
# make_beam_dependency_flags, skipped when a dependency flag is set): ~1-3 s per step, and
# 52 MB of /tmp left behind each time.
REQUIREMENTS_FILE = "requirements.lock"
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_BEAM_REQUIREMENTS = os.path.join(PROJECT_DIR, REQUIREMENTS_FILE)
# Examples in the embedded and tfds datasets (tfrecord inputs are not counted ahead of the run).
DATASET_EXAMPLES = {"digits": 1797, "cifar10": 60000}
MAX_PIPELINE_NAME_LENGTH = 100
# No path separators, and never '.' or '..': the name is a directory under output_dir.
PIPELINE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,%d}" %
                                   (MAX_PIPELINE_NAME_LENGTH - 1))

CONFIG_FLAG = "config"  # --config=NAME picks the preset (configs/) the other flags override.


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Data: the dataset, its splits and the curated schema."""
  # digits (embedded), cifar10 (tensorflow-datasets), tfrecord (tf.Examples) or image_dir (a
  # folder of images in class folders: docs/pipeline.md, "Data").
  dataset: str = "digits"  # The images the run trains and evaluates on.
  # With dataset=tfrecord: the folder of train/, eval/[, test/]; it may be a span pattern, as
  # image_dir.
  tfrecord_dir: Optional[str] = None  # The folder of TFRecord splits.
  # With dataset=tfrecord: a comma list of num_classes names in label order, which the served
  # model answers with; empty: the label's index ('0', '1', ...).
  class_names: Tuple[str, ...] = ()  # The classes' names.
  # With dataset=image_dir: DIR/<class name>/<images>, or DIR/{train,eval,test}/<class name>/
  # for fixed splits; local or on object storage. JPEG, PNG, GIF or BMP of any size and mode.
  # A span pattern reads one folder per span, the newest (or --span's): TFX's placeholders
  # {SPAN}, {SPAN:width}, {VERSION} or {YYYY}-{MM}-{DD}, e.g. gs://b/images/{YYYY}-{MM}-{DD}
  # (docs/pipeline.md, "New data every day").
  image_dir: Optional[str] = None  # The folder of labelled images.
  # With a span pattern in image_dir or tfrecord_dir: the span number to read, or with a date
  # pattern the date YYYY-MM-DD; empty: the newest span. On Kubeflow the runtime parameter
  # `span` (python -m kubeflow run|schedule --span=...).
  span: str = ""  # The span (or date) the run reads; empty = the newest.
  # With a span pattern in image_dir or tfrecord_dir: the train split holds the train splits of
  # the newest train_spans spans up to the run's span; eval and test come from that span alone.
  train_spans: int = 1  # Spans whose train splits the model trains on.
  # With dataset=image_dir: undecodable, empty or oversized files and folders are left out and
  # listed in the run report; without it, ExampleGen stops the run and names them.
  skip_bad_images: bool = False  # Skip bad images instead of failing.
  # Without it, a run whose newest span (and version) is the one the model in production was
  # trained on trains nothing and pushes nothing (it says so and succeeds), and a span older
  # than production's is refused.
  force_retrain: bool = False  # Train even when the data is not newer than production's.
  tfds_data_dir: Optional[str] = None  # The tensorflow-datasets cache; None: tfds' default.
  eval_fraction: float = 0.15  # Share of keys held out for evaluation (model selection).
  test_fraction: float = 0.15  # Share of digits keys held out for the final test only.
  schema_path: str = DEFAULT_SCHEMA_PATH  # The curated schema (label domain, features).

  def __post_init__(self):
    require_finite(self)
    require(self.dataset in DATASETS, "dataset", self.dataset, f"must be one of {DATASETS}")
    require(0.0 < self.eval_fraction < 1.0, "eval_fraction", self.eval_fraction,
            "must be in (0, 1)")
    require(0.0 <= self.test_fraction < 1.0 - self.eval_fraction, "test_fraction",
            self.test_fraction, "must be in [0, 1 - eval_fraction)")
    if self.dataset != "tfrecord":
      require(self.tfrecord_dir is None, "tfrecord_dir", self.tfrecord_dir,
              "is only used with dataset=tfrecord")
      require(not self.class_names, "class_names", ",".join(self.class_names),
              "is only used with dataset=tfrecord (the other datasets name their classes)")
    else:
      require(len(set(self.class_names)) == len(self.class_names) and all(self.class_names),
              "class_names", ",".join(self.class_names), "must be distinct, non-empty names")
    if self.dataset != "image_dir":
      require(self.image_dir is None, "image_dir", self.image_dir,
              "is only used with dataset=image_dir")
      require(not self.skip_bad_images, "skip_bad_images", self.skip_bad_images,
              "is only used with dataset=image_dir")
    self._check_spans()

  @property
  def source_dir(self) -> Optional[str]:
    """The folder (or span pattern) the dataset reads: image_dir or tfrecord_dir."""
    return {"image_dir": self.image_dir, "tfrecord": self.tfrecord_dir}.get(self.dataset)

  @property
  def is_span_pattern(self) -> bool:
    return spans.is_pattern(self.source_dir)

  def _check_spans(self) -> None:
    """A span pattern is valid; span and train_spans need one (train_spans: an image
    folder's)."""
    name = "image_dir" if self.dataset == "image_dir" else "tfrecord_dir"
    if self.is_span_pattern:
      try:
        spans.check_pattern(self.source_dir)
      except spans.SpanError as error:
        require(False, name, self.source_dir, str(error))
    require(self.train_spans >= 1, "train_spans", self.train_spans, "must be >= 1")
    if self.span:
      require(self.is_span_pattern, "span", self.span,
              "needs a span pattern in image_dir or tfrecord_dir (e.g. "
              "--image_dir=gs://b/images/{YYYY}-{MM}-{DD}); without one there is one dataset")
      try:
        spans.requested_span(self.source_dir, self.span)
      except spans.SpanError as error:
        require(False, "span", self.span, str(error).partition(": ")[2] if str(error).startswith(
            "pattern ") else str(error))
    if self.train_spans > 1:
      require(self.is_span_pattern, "train_spans", self.train_spans,
              "needs a span pattern in image_dir or tfrecord_dir (e.g. "
              "--image_dir=gs://b/images/{YYYY}-{MM}-{DD}): its older spans' train splits are "
              "read with the newest")

  @property
  def input_examples(self) -> Optional[int]:
    """Examples of the input dataset, when known without reading it (a local image folder:
    its files, counted by listing it)."""
    if self.dataset == "image_dir" and self.image_dir and not is_object_store_uri(self.image_dir):
      folders = [self.image_dir]
      if self.is_span_pattern:
        try:
          newest = spans.resolve(self.image_dir, self.span)
        except spans.SpanError:
          return None
        folders = [s.folder for s in spans.window(self.image_dir, newest, self.train_spans)]
      return sum(not name.startswith(".") for folder in folders if os.path.isdir(folder)
                 for _, _, files in os.walk(folder) for name in files) or None
    return DATASET_EXAMPLES.get(self.dataset)

  def local_folder(self, path: Optional[str]) -> Optional[str]:
    """The folder a local run reads for `path`: a span pattern's resolved span (the newest or
    `span`), else the path itself."""
    if not path or not spans.is_pattern(path) or is_object_store_uri(path):
      return path
    return spans.resolve(path, self.span).folder


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """Evaluation: the robustness set, corrupted test images."""
  # The robustness set's corruptions, a comma list: the set is these corruptions x severities
  # 1-5 of the test images (cifar10: tfds' cifar10_corrupted; others: made with tfds'
  # corruption code). Default: the 15 benchmark corruptions. Empty: none.
  corruptions: Tuple[str, ...] = reference_corruptions.BENCHMARK_CORRUPTIONS
  examples_per_corruption: int = 100  # Test images per corruption x severity (0: all).
  # 0 = one per core when the slow corruptions have enough images to pay for the start-up
  # (trainer_module/reference_corruptions.py, pool_size).
  corruption_workers: int = 0  # Processes making the generated corrupted images.

  def __post_init__(self):
    known = reference_corruptions.ALL_CORRUPTIONS
    unknown = [name for name in self.corruptions if name not in known]
    require(not unknown, "corruptions", ",".join(self.corruptions),
            f"{unknown} unknown; known: {','.join(known)} (or empty for no robustness set)")
    require(len(set(self.corruptions)) == len(self.corruptions), "corruptions",
            ",".join(self.corruptions), "lists a name twice")
    require(self.examples_per_corruption >= 0, "examples_per_corruption",
            self.examples_per_corruption, "must be >= 0 (0 = every test image)")
    require(self.corruption_workers >= 0, "corruption_workers", self.corruption_workers,
            "must be >= 0 (0 = one per core when that pays)")


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
  """Ensemble: hyper-deep ensemble trials and the greedy selection of members."""
  # Hyper-deep ensemble: hyper_trials Trainers (trial 0 with the trainer config, the others
  # with drawn L2s, label smoothing and seed), of which greedy selection on the eval split keeps
  # at most ensemble_size distinct members. 1 and 1: one Trainer, no ensemble.

  ensemble_size: int = 1  # Most distinct members the ensemble keeps (1: no ensemble).
  hyper_trials: int = 1  # Trial Trainers to select the members from (>= ensemble_size).
  # What selection minimises: nll, acc or nll-acc on the eval split; shift_nll on it and each
  # validation corruption x severity slice, each candidate after its own T.
  ensemble_objective: str = DEFAULT_ENSEMBLE_OBJECTIVE

  def __post_init__(self):
    require(self.ensemble_size >= 1, "ensemble_size", self.ensemble_size, "must be >= 1")
    require(self.hyper_trials >= self.ensemble_size, "hyper_trials", self.hyper_trials,
            f"must be >= ensemble_size ({self.ensemble_size}): the ensemble's members are "
            "chosen among the trials")
    require(self.ensemble_objective in ENSEMBLE_OBJECTIVES, "ensemble_objective",
            self.ensemble_objective, f"must be one of {ENSEMBLE_OBJECTIVES}")


@dataclasses.dataclass(frozen=True)
class GateConfig:
  """Gate: the bounds a model must meet, and may not regress by, to be pushed."""
  min_eval_accuracy: float = 0.9  # Evaluator blesses no model below this eval accuracy.
  # One eval example moves the eval accuracy by 1/n: on a handful the gate would judge noise.
  min_eval_examples: int = 50  # The gate stops a run whose eval split has fewer examples.
  max_accuracy_drop: float = 0.01  # Largest eval accuracy drop allowed against production.
  # The rest of the gate (evaluation branch): calibrated eval ECE and NLL, mean corrupted
  # accuracy, each bounded and allowed to regress at most this much against production.

  # 0.10: the default model is under-confident on clean images (raw ECE 0.07-0.08), and the
  # default temperature fit will not sharpen it at the cost of calibration under shift.
  max_eval_ece: float = 0.10  # Upper bound of the calibrated eval ECE.
  max_ece_increase: float = 0.02  # Largest eval ECE rise allowed against production.
  max_eval_nll: float = 0.3  # Upper bound of the calibrated eval NLL.
  max_nll_increase: float = 0.1  # Largest eval NLL rise allowed against production.
  min_corrupted_accuracy: float = 0.5  # Lower bound of cA, the mean corrupted accuracy.
  max_corrupted_accuracy_drop: float = 0.03  # Largest cA drop allowed against production.
  # Calibration under shift (calibrated probabilities on the corrupted set): cNLL (the NLL of
  # the whole set: its slices are equal), cECE (the mean of the corruption x severity slices'
  # ECEs, as Uncertainty Baselines reports it) and the ECE of the whole set, each bounded and
  # allowed to regress at most this much against production. The bounds hold the default model
  # (spectrally normalised, a temperature by distance) with a margin and refuse the
  # previous default network's calibration under shift (docs/robustness.md).

  max_corrupted_nll: float = 1.0  # Upper bound of cNLL.
  max_corrupted_nll_increase: float = 0.2  # Largest cNLL rise allowed against production.
  max_corrupted_mean_ece: float = 0.15  # Upper bound of cECE, the slices' mean ECE.
  max_corrupted_mean_ece_increase: float = 0.03  # Largest cECE rise allowed against production.
  max_corrupted_ece: float = 0.1  # Upper bound of the ECE of the corrupted set as a whole.
  max_corrupted_ece_increase: float = 0.03  # Largest rise of that ECE against production.

  def __post_init__(self):
    require_finite(self)
    require(0.0 <= self.min_eval_accuracy <= 1.0, "min_eval_accuracy", self.min_eval_accuracy,
            "must be in [0, 1]")
    require(self.min_eval_examples >= 1, "min_eval_examples", self.min_eval_examples,
            "must be >= 1")
    for name in ("max_accuracy_drop", "max_eval_ece", "max_ece_increase", "max_eval_nll",
                 "max_nll_increase", "max_corrupted_accuracy_drop", "max_corrupted_nll",
                 "max_corrupted_nll_increase", "max_corrupted_mean_ece",
                 "max_corrupted_mean_ece_increase", "max_corrupted_ece",
                 "max_corrupted_ece_increase"):
      require(getattr(self, name) >= 0.0, name, getattr(self, name), "must be >= 0")
    require(0.0 <= self.min_corrupted_accuracy <= 1.0, "min_corrupted_accuracy",
            self.min_corrupted_accuracy, "must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class DriftConfig:
  """Drift: how far the new data may move from the data the model in production was trained on
  (docs/pipeline.md, "Drift"). A feature moved when its distance exceeds its bound and its
  two-sample test's p-value is below drift_p_value; a class that vanished or appeared always
  stops the run before training. The defaults detect every shift bench/drift.py applies, with
  no false alarm in its random splits."""
  max_category_distance: float = 0.03  # Largest L-infinity change of a class's (or format's) share.
  max_image_divergence: float = 0.05  # Largest Jensen-Shannon divergence of an image statistic.
  drift_p_value: float = 0.02  # Family-wise significance of the two-sample tests (Bonferroni).
  block_on_drift: bool = False  # A moved feature refuses the push; off: it warns only.
  drift_sample_size: int = 2000  # Images per split the image statistics and BBSD read.
  # Off: no DriftCheck step, so no comparison, no stop on a changed class set, and the version
  # this run pushes keeps no drift baseline (a later run's check against it passes, saying so).
  drift_check: bool = True  # Compare the data with production's before training.

  def __post_init__(self):
    require_finite(self)
    require(self.drift_check or not self.block_on_drift, "block_on_drift", self.block_on_drift,
            "needs drift_check=true: with the check off nothing is compared")
    for name in ("max_category_distance", "max_image_divergence"):
      require(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "must be in [0, 1]")
    require(0.0 < self.drift_p_value < 1.0, "drift_p_value", self.drift_p_value,
            "must be in (0, 1)")
    require(self.drift_sample_size >= 10, "drift_sample_size", self.drift_sample_size,
            "must be >= 10")


@dataclasses.dataclass(frozen=True)
class RunnerConfig:
  """Runner: the run's name, where its outputs go, and the step cache."""
  pipeline_name: str = "wrn_image_classifier"  # Names the run's directories and MLMD contexts.
  # On Kubeflow it is on object storage: gs:// or s3://.
  output_dir: str = "outputs"  # Pipeline root, MLMD database and serving models go here.
  enable_cache: bool = True  # Reuse a step's result when its inputs and code are unchanged.
  # One JSON entry per run: span, outcome, pushed version, figures. Empty:
  # <output_dir>/history/<pipeline_name>; local or on object storage, as output_dir.
  history_dir: str = ""  # Where the run history is kept.
  history_runs: int = 10  # The last runs the report's History section shows.

  def __post_init__(self):
    require(bool(self.output_dir.strip()), "output_dir", self.output_dir, "must not be empty")
    require(self.history_runs >= 1, "history_runs", self.history_runs, "must be at least 1")
    require(PIPELINE_NAME_PATTERN.fullmatch(self.pipeline_name) is not None, "pipeline_name",
            self.pipeline_name, f"must be 1-{MAX_PIPELINE_NAME_LENGTH} letters, digits, '_', "
            "'-' or '.', starting with a letter or digit (it names directories and MLMD "
            "contexts)")

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
  def logs_dir(self) -> str:
    return os.path.join(self.output_dir, "logs")

  @property
  def reports_dir(self) -> str:
    return os.path.join(self.output_dir, "reports")

  @property
  def history_directory(self) -> str:
    """Where every run of this pipeline writes its history entry (components/run_history.py)."""
    return self.history_dir or os.path.join(self.output_dir, "history", self.pipeline_name)


@dataclasses.dataclass(frozen=True)
class BeamConfig:
  """Beam: the engine of every Beam step and its workers."""
  beam_workers: int = 0  # Beam DirectRunner workers; 0 = one per CPU core.
  # auto, multi_processing, multi_threading or in_memory. auto: a Beam step whose input has at
  # most beam_in_memory_max_examples examples runs in_memory in one process (starting worker
  # processes, each importing TensorFlow and TFX, costs more than they save on small data:
  # measured with bench/beam_modes.py); bigger or uncounted inputs multi_processing.
  beam_running_mode: str = "auto"  # How the DirectRunner runs a step.
  beam_in_memory_max_examples: int = 10000  # auto's largest input run in one process.
  # direct (DirectRunner in the step's process), portable (Beam's portable runner: a Flink,
  # Spark or Beam job server and its SDK harnesses) or dataflow (Kubeflow runs only); see
  # pipeline/beam_engine.py and docs/kubeflow.md, "Beam engines".
  beam_runner: str = "direct"  # The engine of every Beam step.
  beam_job_endpoint: str = ""  # host:port of the portable job server.
  # DOCKER, EXTERNAL or PROCESS; beam_environment_config gives what each needs.
  beam_environment_type: str = "DOCKER"  # How the portable runner starts SDK harnesses.
  # DOCKER: the SDK harness image (on Kubeflow, default: image); EXTERNAL: host:port of a
  # worker pool (required); PROCESS: {"command": ...} JSON (on Kubeflow, default: the image's
  # Beam boot program).
  beam_environment_config: str = ""  # The SDK harnesses' environment, by its type.

  def __post_init__(self):
    require(self.beam_workers >= 0, "beam_workers", self.beam_workers,
            "must be >= 0 (0 = one per CPU core)")
    require(self.beam_running_mode in BEAM_RUNNING_MODES, "beam_running_mode",
            self.beam_running_mode, f"must be one of {BEAM_RUNNING_MODES}")
    require(self.beam_in_memory_max_examples >= 0, "beam_in_memory_max_examples",
            self.beam_in_memory_max_examples, "must be >= 0")
    self._check_engine()

  def _check_engine(self) -> None:
    """The engine flags (beam_engine.py), wherever the run is; a runner adds its own rules."""
    runner = self.beam_runner
    require(runner in beam_engine.BEAM_RUNNERS, "beam_runner", runner,
            f"must be one of {beam_engine.BEAM_RUNNERS}")
    if runner != "portable":
      for name in ("beam_job_endpoint", "beam_environment_config"):
        value = getattr(self, name)
        require(not value, name, value, f"is not used with beam_runner={runner}")
    if runner == "direct":
      return
    require(self.beam_workers == 0, "beam_workers", self.beam_workers,
            f"is for the direct runner; with beam_runner={runner} the engine scales its workers")
    if runner != "portable":
      return
    require(beam_engine.HOST_PORT.fullmatch(self.beam_job_endpoint) is not None,
            "beam_job_endpoint", self.beam_job_endpoint, "must be host:port of the job server "
            "with beam_runner=portable (e.g. flink-jobserver.flink:8099)")
    kind, given = self.beam_environment_type, self.beam_environment_config
    require(kind in beam_engine.BEAM_ENVIRONMENT_TYPES, "beam_environment_type", kind,
            f"must be one of {beam_engine.BEAM_ENVIRONMENT_TYPES}")
    if kind == "EXTERNAL":
      require(beam_engine.HOST_PORT.fullmatch(given) is not None, "beam_environment_config",
              given, "must be host:port of the SDK worker pool with "
              "beam_environment_type=EXTERNAL")
    elif kind == "PROCESS" and given:
      require(beam_engine.is_process_config(given), "beam_environment_config", given,
              'must be JSON with a "command" with beam_environment_type=PROCESS')

  def portable_args(self, image: str) -> list:
    """Beam arguments submitting a step to the portable job server; `image`: the default
    harness of DOCKER (a Kubeflow run's pipeline image)."""
    return beam_engine.portable_args(self.beam_job_endpoint, self.beam_environment_type,
                                     self.beam_environment_config, image)


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """A run of the pipeline: its groups of settings, and the rules that span them."""
  data: DataConfig = dataclasses.field(default_factory=DataConfig)
  # The presets in configs/ choose the model; bare, it is the original script's recipe.
  trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
  evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
  ensemble: EnsembleConfig = dataclasses.field(default_factory=EnsembleConfig)
  gate: GateConfig = dataclasses.field(default_factory=GateConfig)
  drift: DriftConfig = dataclasses.field(default_factory=DriftConfig)
  runner: RunnerConfig = dataclasses.field(default_factory=RunnerConfig)
  beam: BeamConfig = dataclasses.field(default_factory=BeamConfig)

  def __post_init__(self):
    data, trainer = self.data, self.trainer
    if data.dataset == "tfrecord":
      require(not data.class_names or len(data.class_names) == trainer.model.num_classes,
              "class_names", ",".join(data.class_names),
              f"must name num_classes={trainer.model.num_classes} classes")
    self._check_where_it_runs()
    _check_corruptions(self.evaluation.corruptions, data.dataset,
                       None if data.is_span_pattern else data.tfrecord_dir)
    fit = trainer.calibration.temperature_fit
    if calibration_methods.get(fit).needs_validation_corruptions:
      tuning = [name for name in self.evaluation.corruptions
                if name in reference_corruptions.VALIDATION_CORRUPTIONS]
      require(not tuning, "corruptions", ",".join(self.evaluation.corruptions),
              f"{tuning} choose the temperature (temperature_fit={fit}), so "
              "they cannot also be evaluated; leave them out or pick another temperature_fit")
    require(trainer.training.mode == "train_and_eval", "mode", trainer.training.mode,
            "the pipeline's Trainer trains and evaluates (other modes are for the standalone "
            "`python -m trainer_module`)")

  def _check_where_it_runs(self) -> None:
    """A local run's rules: its inputs on this machine, and a Beam engine it can start without
    a cluster's image. A cluster config replaces them with its own."""
    object.__setattr__(self, "runner", dataclasses.replace(
        self.runner, output_dir=os.path.abspath(self.runner.output_dir)))
    beam, data = self.beam, self.data
    require(beam.beam_runner != "dataflow", "beam_runner", beam.beam_runner,
            "is for Kubeflow runs (python -m kubeflow ... --image=...): Dataflow's workers run "
            "the pipeline image; locally, use direct or portable")
    require(beam.beam_runner != "portable" or beam.beam_environment_type == "EXTERNAL"
            or bool(beam.beam_environment_config), "beam_environment_config",
            beam.beam_environment_config, "is required with beam_environment_type="
            f"{beam.beam_environment_type} on a local run: the SDK harness image (DOCKER) or "
            "the boot command as JSON (PROCESS)")
    if data.dataset == "tfrecord":
      _check_tfrecord_dir(_span_folder(data, "tfrecord_dir"))
    if data.dataset == "image_dir":
      _check_image_dir(_span_folder(data, "image_dir"))
    _check_local_paths(self)
    check_schema(self)
    if data.dataset == "tfrecord":
      _check_tfrecord_examples(_span_folder(data, "tfrecord_dir"), data.schema_path)
      if data.is_span_pattern:
        _check_corruptions(self.evaluation.corruptions, data.dataset,
                           _span_folder(data, "tfrecord_dir"))

  def check_output_dir(self) -> None:
    """For a local run: output_dir, and every directory the run writes under it (the
    pipeline root, MLMD's, the serving directory, the logs and the report copies), must be
    directories this user can create files in, or be creatable, and the serving directory must
    have a version number left for the next push. The runner calls it, not the constructor: it
    depends on who runs where, and a config built only to compile for a cluster writes
    nothing locally."""
    runner = self.runner
    output_dir, serving_model_dir = runner.output_dir, runner.serving_model_dir
    _check_writable_dir(output_dir, output_dir, "")
    for name, path in (("pipeline_root", os.path.dirname(runner.pipeline_root)),
                       ("metadata", os.path.dirname(os.path.dirname(runner.metadata_path))),
                       ("logs", runner.logs_dir), ("reports", runner.reports_dir)):
      _check_writable_dir(output_dir, path, f"its {name} directory ")
    _check_writable_dir(output_dir, serving_model_dir, "its serving directory ")
    from components import pusher
    problem = pusher.serving_directory_problem(serving_model_dir)
    require(problem is None, "output_dir", output_dir, f"its serving directory: {problem}")

  @property
  def trials(self) -> Tuple[TrainerConfig, ...]:
    """The trial Trainers' configs (one, the trainer config, without an ensemble)."""
    return tuple(hyper_trials(self.trainer, self.ensemble.hyper_trials))

  @property
  def uses_s3(self) -> bool:
    data = self.data
    return any(isinstance(path, str) and path.startswith("s3://") for path in
               (self.runner.output_dir, data.tfrecord_dir, data.image_dir, data.tfds_data_dir,
                data.schema_path))

  @property
  def declared_class_names(self) -> Tuple[str, ...]:
    """The classes' names when known before the run; () for an image folder, whose ExampleGen
    finds them."""
    if self.data.dataset == "tfrecord":
      return self.data.class_names or index_names(self.trainer.model.num_classes)
    return DATASET_CLASS_NAMES.get(self.data.dataset, ())

  def beam_step_args(self, examples: Optional[int]) -> list:
    """What a Beam step adds to beam_pipeline_args() for an input of `examples` (TFX puts a
    step's arguments after the pipeline's, and Beam keeps a repeated flag's last value): the
    engine auto picks for that size."""
    if self.beam.beam_running_mode != "auto" or self.beam.beam_runner != "direct":
      return []
    return [arg for arg in self.beam_pipeline_args(examples) if arg.startswith("--direct_")]

  def beam_pipeline_args(self, examples: Optional[int] = None) -> list:
    """A Beam step's arguments on this machine: the engine, and s3:// set up in each SDK
    worker. `examples`: the size of the step's input, when known (auto picks by it)."""
    beam = self.beam
    if beam.beam_runner == "portable":
      # What the harnesses have installed, staged without the download of every package
      # (beam_engine.SKIP_REQUIREMENTS_DOWNLOAD), which also stops TFX from building an sdist
      # of itself for them (tfx/utils/dependency_utils.py, make_beam_dependency_flags).
      return (beam.portable_args("") + [f"--requirements_file={LOCAL_BEAM_REQUIREMENTS}",
                                        beam_engine.SKIP_REQUIREMENTS_DOWNLOAD]
              + self.s3_worker_args())
    mode = beam.beam_running_mode
    if mode == "auto":
      small = examples is not None and examples <= beam.beam_in_memory_max_examples
      mode = "in_memory" if small else "multi_processing"
    workers = 1 if mode == "in_memory" else beam.beam_workers or os.cpu_count() or 1
    return ([f"--direct_running_mode={mode}", f"--direct_num_workers={workers}",
             f"--requirements_file={LOCAL_BEAM_REQUIREMENTS}"] + self.s3_worker_args())

  def s3_worker_args(self) -> list:
    """s3:// set up in each SDK worker, when the run reads or writes it."""
    return [f"--beam_plugin={object_storage.BEAM_PLUGIN}"] if self.uses_s3 else []

  def replace(self, **overrides) -> "PipelineConfig":
    """A copy with leaf fields (flat names, the trainer's too) replaced."""
    return groups.build(type(self), overrides, self)


def usage(preset: str = configs.DEFAULT_PRESET,
          command: str = "python -m local_runner [--flag=value ...]   (or: make run ARGS=...)",
          config_class: type = PipelineConfig) -> str:
  """Every flag, by group, with its default (the preset's, else its class's) and what it means
  (the comments of its field)."""
  preset_section = ("preset", [(CONFIG_FLAG, preset, CONFIG_HELP)])
  sections = config_sections(from_preset(preset), config_class)
  return f"usage: {command}\n" + describe_flags([preset_section] + sections)


def from_preset(name: str = configs.DEFAULT_PRESET) -> PipelineConfig:
  """The config of a preset in configs/ (its fields over the dataclasses' defaults)."""
  return groups.build(PipelineConfig, configs.get_config(name))


def preset_named(argv: Sequence[str], default_preset: str = configs.DEFAULT_PRESET) -> str:
  """The preset `--config=NAME` among `argv` picks (-h and --help left aside), else
  `default_preset`; a name configs/ does not have is refused."""
  presets = [value for name, value in name_value_pairs([arg for arg in argv
                                                        if arg not in ("-h", "--help")])
             if name == CONFIG_FLAG]
  name = presets[0] if presets else default_preset
  configs.get_config(name)  # Refuses an unknown name, naming the flag.
  return name


def from_flags(argv: Sequence[str], base: Optional[PipelineConfig] = None,
               config_class: type = PipelineConfig,
               default_preset: str = configs.DEFAULT_PRESET) -> PipelineConfig:
  """The run's config: `--config=NAME`'s preset (else `base`, else `default_preset`) with
  `--field value` / `--field=value` flags (or `--group.field=value`) over it, built once."""
  pairs = name_value_pairs(argv)
  flags = parse_config_flags([f"--{name}={value}" for name, value in pairs
                              if name != CONFIG_FLAG], config_class)
  if any(name == CONFIG_FLAG for name, _ in pairs) or base is None:
    return groups.build(config_class, {
        **configs.get_config(preset_named(argv, default_preset)), **flags})
  return groups.build(config_class, flags, base)


def _check_writable_dir(output_dir: str, path: str, what: str) -> None:
  """`path` (output_dir or `what` under it) is a directory this user can create files in, or
  can be created: checked without writing into an existing directory (a probe file would be a
  write); a missing one is created and removed again, the one test that file systems refusing
  writes past their permission bits (sysfs, procfs, some FUSE mounts) answer truly."""
  require(not os.path.exists(path) or os.path.isdir(path), "output_dir", output_dir,
          f"{what}{path} is a file, not a directory" if what else "is a file, not a directory")
  existing = path
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  require(os.path.isdir(existing), "output_dir", output_dir,
          f"{what}cannot be created: {existing} is a file")
  if os.statvfs(existing).f_flag & os.ST_RDONLY:
    require(False, "output_dir", output_dir, f"{what}is not writable: {existing} is on a "
            "read-only file system")
  require(os.access(existing, os.W_OK | os.X_OK), "output_dir", output_dir,
          f"{what}is not writable: this user may not create files in {existing}")
  if existing != path:
    probe = os.path.join(existing, os.path.relpath(path, existing).split(os.sep)[0])
    try:
      os.mkdir(probe)
      os.rmdir(probe)
    except OSError as error:
      require(False, "output_dir", output_dir,
              f"{what}cannot be created: {existing} refuses new directories ({error.strerror})")


def _span_folder(data: DataConfig, name: str) -> Optional[str]:
  """A local span pattern's folder for this run (the newest span, or --span's), refused naming
  the pattern and the folder when it is missing or empty; any other path as it is."""
  try:
    return data.local_folder(getattr(data, name))
  except spans.SpanError as error:
    require(False, name, getattr(data, name), str(error))


def _check_tfrecord_dir(path: Optional[str]) -> None:
  """Every split the run reads (train/, eval/, and test/ when present) has a readable record."""
  require(bool(path), "tfrecord_dir", path, "is required with dataset=tfrecord")
  require(os.path.isdir(path), "tfrecord_dir", path, "is not a directory")
  for split in TFRECORD_SPLITS_REQUIRED:
    split_dir = os.path.join(path, split)
    require(os.path.isdir(split_dir), "tfrecord_dir", path,
            f"has no {split_dir} (expected {'/, '.join(TFRECORD_SPLITS_REQUIRED)}/"
            " and optionally test/ subdirectories)")
  for split in TFRECORD_SPLITS_REQUIRED + ("test",):
    split_dir = os.path.join(path, split)
    if os.path.isdir(split_dir):
      problem = tfrecord_check.split_problem(split_dir)
      require(problem is None, "tfrecord_dir", path, f"split '{split}': {problem}")


def _check_tfrecord_examples(path: str, schema_path: str) -> None:
  """The first example of each input file fits the curated schema (a wrong value type, a
  missing or unknown feature is named with its file before any step runs)."""
  from google.protobuf import text_format
  from tensorflow_metadata.proto.v0 import schema_pb2
  with open(schema_path) as f:
    schema = text_format.Parse(f.read(), schema_pb2.Schema())
  for split in TFRECORD_SPLITS_REQUIRED + ("test",):
    split_dir = os.path.join(path, split)
    if os.path.isdir(split_dir):
      problem = tfrecord_check.first_example_problem(split_dir, schema)
      require(problem is None, "tfrecord_dir", path,
              f"split '{split}': {problem} (schema_path={schema_path})")


def _check_image_dir(path: Optional[str]) -> None:
  """A local image folder exists (on object storage: read by ExampleGen in its step only);
  its files are listed and read by ExampleGen, which names the bad ones."""
  require(bool(path), "image_dir", path, "is required with dataset=image_dir")
  if not is_object_store_uri(path):
    require(os.path.isdir(path), "image_dir", path, "is not a directory")


def _check_local_paths(config: "PipelineConfig") -> None:
  """Paths the flags name that a step reads later, checked before any step runs."""
  data_dir = config.data.tfds_data_dir
  if data_dir and not is_object_store_uri(data_dir):
    require(os.path.isdir(data_dir), "tfds_data_dir", data_dir, "is not a directory")
  warm_start = config.trainer.training.warm_start
  if warm_start not in (NO_WARM_START, WARM_START_FROM_PRODUCTION) and not is_object_store_uri(
      warm_start):
    from trainer_module import warm_start as warm_start_lib
    try:
      warm_start_lib.check_source(warm_start, config.trainer.to_dict())
    except warm_start_lib.WarmStartError as error:
      raise ValueError(f"Invalid config value {error}") from None


def robustness_source(dataset: str) -> str:
  """Where corrupted images come from: CIFAR-10-C for cifar10, generated for the others."""
  return "cifar10_corrupted" if dataset == "cifar10" else "generated"


def _check_corruptions(names: Tuple[str, ...], dataset: str, tfrecord_dir: Optional[str]) -> None:
  """A tfrecord run's robustness set needs test images to corrupt."""
  if names and dataset == "tfrecord" and tfrecord_dir and os.path.isdir(tfrecord_dir):
    require(os.path.isdir(os.path.join(tfrecord_dir, "test")), "corruptions", ",".join(names),
            f"needs test images to corrupt, and {tfrecord_dir} has no test/ directory; add one "
            "or pass --corruptions= (no robustness set)")


def check_runs_here(config: PipelineConfig) -> None:
  """For a local run: an s3:// folder the run reads can be reached and read with this
  machine's settings and credentials (on Kubeflow each pod asks with its own), and every
  generated corruption can run on this machine (on Kubeflow they run in the pipeline's
  image, which has what they need)."""
  data = config.data
  for name, path in (("image_dir", data.image_dir if data.dataset == "image_dir" else None),
                     ("tfrecord_dir", data.tfrecord_dir if data.dataset == "tfrecord" else None)):
    if isinstance(path, str) and path.startswith("s3://"):
      # Of a span pattern, the folder above its first placeholder (its spans are listed by
      # the ExampleGen step).
      problem = object_storage.s3_folder_problem(
          spans.split_base(path)[0] if spans.is_pattern(path) else path)
      require(problem is None, name, path, problem)
  if robustness_source(config.data.dataset) != "generated":
    return
  missing = reference_corruptions.unavailable(config.evaluation.corruptions)
  require(not missing, "corruptions", ",".join(config.evaluation.corruptions), "; ".join(
      f"{name} cannot run on this machine: it {reason}" for name, reason in missing.items())
          + " (or leave it out of --corruptions)")


def check_schema(config: PipelineConfig) -> None:
  """The curated schema must exist and bound the label to [0, num_classes) (an image folder's
  classes set the label domain and the model's outputs at run time)."""
  _check_schema(config.data.schema_path, None if config.data.dataset == "image_dir"
                else config.trainer.model.num_classes)


def _check_schema(path: str, num_classes: Optional[int]) -> None:
  from google.protobuf import text_format
  from tensorflow_metadata.proto.v0 import schema_pb2
  require(os.path.isfile(path), "schema_path", path, "does not exist")
  schema = schema_pb2.Schema()
  with open(path) as f:
    try:
      text_format.Parse(f.read(), schema)
    except text_format.ParseError as error:
      raise ValueError(
          f"Invalid config value schema_path={path!r}: not a schema: {error}") from None
  label = next((f for f in schema.feature if f.name == "label"), None)
  require(label is not None and label.HasField("int_domain"), "schema_path", path,
          "must give the 'label' feature an int_domain")
  require(num_classes is None or (label.int_domain.min == 0 and
                                  label.int_domain.max == num_classes - 1), "num_classes",
          num_classes, f"disagrees with the label domain [{label.int_domain.min}, "
          f"{label.int_domain.max}] of {path}")
