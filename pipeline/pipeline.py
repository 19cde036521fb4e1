"""The pipeline graph (docs/pipeline.md draws it), one function of the run's config and the
parts its runner hands in (RunnerParts: schema, input base, Trainer, metadata store, Beam
arguments), as the TFX templates' runners do."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Callable, Optional, Sequence, Tuple

from tfx import v1 as tfx

from components import evaluation_set
from components.class_schema import ClassSchemaGen
from components.ensemble import EnsembleSelector
from components.evaluation_set import EvaluationSetGen
from components import spans
from components.example_gen import ImageDatasetExampleGen, TFRecordExampleGen
from components.evaluator import Evaluator
from components.production_model import ProductionModel
from components.pusher import VersionedPusher
from components.drift_check import STEP_ID as DRIFT_CHECK_ID, DriftCheck
from components.data_check import STEP_ID as DATA_CHECK_ID, DataCheck
from reporting.run_report import RunReport
from components.served_model_check import ServedModelCheck
from components.span_check import STEP_ID as SPAN_CHECK_ID, SpanCheck, TRAIN_KEY
from pipeline.config import PipelineConfig, robustness_source
from pipeline.evaluation import eval_config, report_settings
from trainer_module import preprocessing
from trainer_module.config import (FINGERPRINT_KEY, TRAINER_CONFIG_KEY,
                                   WARM_START_FROM_PRODUCTION)

WARM_START_MODEL_ID = "WarmStartModel"
DRIFT_BASELINE_MODEL_ID = "DriftBaselineModel"  # Production's model and its drift baseline.
TRAINER_RUN_FN = "trainer_module.tfx_trainer.run_fn"  # Every runner's Trainer runs this.
_REPOSITORY_DIR = os.path.dirname(os.path.dirname(__file__))
_TRAINER_MODULE_DIR = os.path.join(_REPOSITORY_DIR, "trainer_module")


# (trial, the trial Trainer's custom_config, its inputs) -> the Trainer component.
TrainerFactory = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class RunnerParts:
  """What the graph needs that differs by where it runs, resolved by the runner."""
  schema_file: str  # The curated schema ClassSchemaGen reads.
  # dataset=tfrecord: a directory (of a span pattern, the folder above its first placeholder:
  # tfrecord_input_base()), or a runtime parameter.
  tfrecord_input_base: Any
  tfrecord_splits: Tuple[str, ...]  # dataset=tfrecord: the splits ImportExampleGen reads.
  make_trainer: TrainerFactory
  metadata_connection_config: Optional[Any]  # None: the orchestrator brings its own MLMD.
  beam_pipeline_args: Sequence[str]  # Every Beam step's engine where the runner runs them.
  beam_step_args: Callable[[Optional[int]], list]  # What a step of that many examples adds.
  span: Any = ""  # The span a run reads ("" = the newest), or a runtime parameter.


def tfrecord_input_base(tfrecord_dir: str) -> str:
  """ImportExampleGen's input_base for tfrecord_dir: the folder itself, or of a span pattern
  the folder above its first placeholder (the rest goes into the split patterns)."""
  return spans.split_base(tfrecord_dir)[0] if spans.is_pattern(tfrecord_dir) else tfrecord_dir


def trainer_custom_config(config: PipelineConfig, fingerprint: str, trial: int = 0) -> dict:
  """What run_fn reads: the trial's trainer config, and the code fingerprint for the cache."""
  return {TRAINER_CONFIG_KEY: config.trials[trial].to_dict(), FINGERPRINT_KEY: fingerprint}


def trainer_module_fingerprint() -> str:
  """A hash of trainer_module's code (all that Transform and the Trainer run, not its CLI).
  Transform and Trainer load it by import path, which TFX's cache key does not cover, so the
  fingerprint goes into their config: edit the code, and they run again instead of reusing a
  stale cached result."""
  digest = hashlib.sha256()
  paths = [os.path.join(_TRAINER_MODULE_DIR, name) for name in sorted(
      os.listdir(_TRAINER_MODULE_DIR)) if name.endswith(".py")
           and not name.endswith("_test.py") and name != "__main__.py"]  # Not the CLI.
  for path in paths:
    digest.update(os.path.relpath(path, _REPOSITORY_DIR).encode())
    with open(path, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def example_gen(config: PipelineConfig, parts: RunnerParts):
  data = config.data
  if data.dataset == "tfrecord":
    # A span pattern's folders are in the split patterns, where TFX's driver resolves them.
    folder = spans.split_base(data.tfrecord_dir)[1] if data.is_span_pattern else ""
    return TFRecordExampleGen(
        input_base=parts.tfrecord_input_base,
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name=s, pattern=f"{folder}/{s}/*" if folder else f"{s}/*")
            for s in parts.tfrecord_splits]),
        span=parts.span, span_pattern=folder,
        train_spans=data.train_spans).with_id("ImportExampleGen")
  return ImageDatasetExampleGen(source=data.dataset,
                                eval_fraction=data.eval_fraction,
                                test_fraction=data.test_fraction,
                                tfds_data_dir=data.tfds_data_dir,
                                image_dir=data.image_dir,
                                skip_bad_images=data.skip_bad_images,
                                span=parts.span, train_spans=data.train_spans)


def transform_component(config: PipelineConfig, examples, schema, fingerprint: str):
  """Decode, normalise and (with --augmix) write AugMix views, on Beam."""
  return tfx.components.Transform(
      examples=examples,
      schema=schema,
      preprocessing_fn="trainer_module.preprocessing.preprocessing_fn",
      splits_config=tfx.proto.SplitsConfig(analyze=["train"], transform=["train", "eval"]),
      custom_config={preprocessing.TRANSFORM_OPTIONS_KEY: config.trainer.transform_options(),
                     FINGERPRINT_KEY: fingerprint},
      force_tf_compat_v1=preprocessing.FORCE_TF_COMPAT_V1,
      disable_statistics=True)  # StatisticsGen already covers the raw data.


def span_check(config: PipelineConfig, examples) -> SpanCheck:
  """Whether this run trains on ExampleGen's span (components/span_check.py)."""
  return SpanCheck(examples=examples.outputs["examples"],
                   serving_directory=config.runner.serving_model_dir,
                   history_dir=config.runner.history_directory,
                   force_retrain=config.data.force_retrain).with_id(SPAN_CHECK_ID)


def input_steps(config: PipelineConfig, parts: RunnerParts, fingerprint: str,
                examples) -> tuple:
  """StatisticsGen, ClassSchemaGen, ExampleValidator, the data check, Transform over
  ExampleGen's `examples`: the steps over the input data, the Beam ones with the engine for its
  size; returns them after ExampleGen."""
  statistics = tfx.components.StatisticsGen(examples=examples.outputs["examples"])
  schema = ClassSchemaGen(examples=examples.outputs["examples"], schema_file=parts.schema_file,
                          class_names=json.dumps(list(config.declared_class_names)))
  validator = tfx.components.ExampleValidator(statistics=statistics.outputs["statistics"],
                                              schema=schema.outputs["schema"])
  data_check = DataCheck(examples=examples.outputs["examples"],
                         anomalies=validator.outputs["anomalies"], schema=schema.outputs["schema"],
                         input_base=parts.tfrecord_input_base if config.data.dataset == "tfrecord"
                         else "", min_train_examples=config.trainer.training.per_core_batch_size,
                         min_eval_examples=config.gate.min_eval_examples).with_id(DATA_CHECK_ID)
  transform = transform_component(config, examples.outputs["examples"], schema.outputs["schema"],
                                  fingerprint)
  transform.add_upstream_node(data_check)
  # Transform counts its input examples like the others, not the AugMix views it writes: the
  # views are TensorFlow work, which runs on every core in one process, and worker processes
  # only add their start-up (bench/beam_modes.py: 1,797 x 9 images 13.3 s in_memory against
  # 21.7 s multi_processing; with 4x the views, --augmix_view_sets 16, 19.1 s against 28.4 s).
  for step in (examples, statistics, data_check, transform):
    step.with_beam_pipeline_args(parts.beam_step_args(config.data.input_examples))
  return examples, statistics, schema, validator, data_check, transform


def drift_check(config: PipelineConfig, examples, statistics, schema, baseline_model):
  """The new data against the baseline kept with the model in production: a changed class set
  stops the run before training; a moved distribution warns, or with --block_on_drift makes
  the Pusher refuse the candidate."""
  settings = config.drift
  return DriftCheck(
      examples=examples.outputs["examples"], statistics=statistics.outputs["statistics"],
      schema=schema.outputs["schema"], production_model=baseline_model.outputs["model"],
      max_category_distance=settings.max_category_distance,
      max_image_divergence=settings.max_image_divergence,
      drift_p_value=settings.drift_p_value, block_on_drift=int(settings.block_on_drift),
      sample_size=settings.drift_sample_size).with_id(DRIFT_CHECK_ID)


def create_pipeline(config: PipelineConfig, parts: RunnerParts) -> tfx.dsl.Pipeline:
  examples = example_gen(config, parts)
  check = span_check(config, examples)
  # Nothing new, nothing trained: every step after the span check runs only when it decided
  # to train. The run report is among them: its inputs are the trained steps' outputs (on
  # Kubeflow a task after a skipped one is skipped too), so a run that trains nothing says why
  # in the span check's decision and its history entry, which the next report shows.
  with tfx.dsl.Cond(check.outputs["decision"].future()[0].custom_property(TRAIN_KEY) == 1):
    trained = training_steps(config, parts, examples, check)
  return tfx.dsl.Pipeline(
      pipeline_name=config.runner.pipeline_name,
      pipeline_root=config.runner.pipeline_root,
      components=[examples, check, *trained],
      enable_cache=config.runner.enable_cache,
      metadata_connection_config=parts.metadata_connection_config,
      beam_pipeline_args=list(parts.beam_pipeline_args))


def training_steps(config: PipelineConfig, parts: RunnerParts, examples, check) -> list:
  """The steps after the span check: validation, training, the gate, the push and the report."""
  fingerprint = trainer_module_fingerprint()
  examples, statistics, schema, validator, data_check, transform = input_steps(
      config, parts, fingerprint, examples)

  # The Evaluator's ProductionModel depends on the Trainer (its candidate), so the Trainer's
  # base model, and the drift check's baseline, come from an instance of their own, resolved
  # before training.
  warm_start_model = None
  if config.trainer.training.warm_start == WARM_START_FROM_PRODUCTION:
    warm_start_model = ProductionModel(
        serving_directory=config.runner.serving_model_dir).with_id(WARM_START_MODEL_ID)
  production_steps = [warm_start_model] if warm_start_model else []
  drift_report = None  # With --drift_check=false: nothing compared, no baseline pushed.
  if config.drift.drift_check:
    baseline_model = warm_start_model or ProductionModel(
        serving_directory=config.runner.serving_model_dir).with_id(DRIFT_BASELINE_MODEL_ID)
    drift = drift_check(config, examples, statistics, schema, baseline_model)
    drift.add_upstream_node(data_check)
    transform.add_upstream_node(drift)  # Before Transform and the Trainer: a changed class set
    # stops the run before it costs their time.
    production_steps = [baseline_model, drift]
    drift_report = drift.outputs["drift_report"]
  trainers = [parts.make_trainer(
      trial, trainer_custom_config(config, fingerprint, trial),
      base_model=warm_start_model.outputs["model"] if warm_start_model else None,
      examples=transform.outputs["transformed_examples"],
      transform_graph=transform.outputs["transform_graph"],
      schema=schema.outputs["schema"],
      train_args=tfx.proto.TrainArgs(splits=["train"]),
      eval_args=tfx.proto.EvalArgs(splits=["eval"]))
      for trial in range(config.ensemble.hyper_trials)]
  if len(trainers) > 1:  # Independent tasks: a cluster runs them in parallel.
    trainers = [t.with_id(f"Trainer_trial_{i}") for i, t in enumerate(trainers)]

  eval_examples = EvaluationSetGen(
      examples=examples.outputs["examples"], source=robustness_source(config.data.dataset),
      corruption_names=",".join(config.evaluation.corruptions),
      examples_per_corruption=config.evaluation.examples_per_corruption,
      tfds_data_dir=config.data.tfds_data_dir or "", workers=config.evaluation.corruption_workers,
      code_fingerprint=evaluation_set.examples_code_fingerprint())
  eval_examples.add_upstream_node(data_check)

  model_components = list(trainers)
  if len(trainers) > 1:
    calibration = config.trainer.calibration
    model_components.append(EnsembleSelector(
        trainers, transform.outputs["transformed_examples"], transform.outputs["transform_graph"],
        eval_examples.outputs["evaluation_set"], ensemble_size=config.ensemble.ensemble_size,
        objective=config.ensemble.ensemble_objective,
        eval_batch_size=config.trainer.training.eval_batch_size,
        num_bins=calibration.num_bins, temperature_fit=calibration.temperature_fit,
        validation_corruption_examples=calibration.validation_corruption_examples,
        fingerprint=fingerprint))
  model = model_components[-1].outputs["model"]

  production = ProductionModel(serving_directory=config.runner.serving_model_dir, candidate=model)

  # The Evaluator, like Transform, runs in the engine for the input data's size, not for its
  # own input's: the corrupted copies add model calls, TensorFlow's work on every core of one
  # process, which worker processes would share out and contend for (bench/evaluator.py, every
  # digits test image, 22,456 examples: 29.8 s in_memory against 36.5 s multi_processing).
  evaluator = Evaluator(
      examples=eval_examples.outputs["evaluation_set"],
      model=model,
      baseline_model=production.outputs["model"],
      example_splits=[evaluation_set.EVAL, evaluation_set.TEST, evaluation_set.CORRUPTED],
      eval_config=eval_config(config)).with_beam_pipeline_args(
          parts.beam_step_args(config.data.input_examples))

  # The candidate as a serving client sees it (raw tf.Examples through its signature, in a
  # fresh process): the Pusher publishes only what passes this and the gate.
  served_check = ServedModelCheck(model=model, examples=examples.outputs["examples"],
                                  evaluation=evaluator.outputs["evaluation"])

  # Keeps the drift baseline of this run's data with the version it pushes; with
  # --block_on_drift refuses a candidate trained on data that moved.
  pusher = VersionedPusher(
      model=model,
      model_blessing=evaluator.outputs["blessing"],
      infra_blessing=served_check.outputs["infra_blessing"],
      base_directory=config.runner.serving_model_dir,
      drift=drift_report).with_id("Pusher")

  # Whatever the gate and the check decided: the report says what was pushed, or why not.
  report = RunReport(
      evaluation=evaluator.outputs["evaluation"], blessing=evaluator.outputs["blessing"],
      served_check=served_check.outputs["infra_blessing"], model=model,
      pushed_model=pusher.outputs["pushed_model"],
      evaluation_set=eval_examples.outputs["evaluation_set"],
      input_examples=examples.outputs["examples"], span_decision=check.outputs["decision"],
      drift=drift_report, settings=report_settings(config).to_json(),
      history_dir=config.runner.history_directory, history_runs=config.runner.history_runs)

  return [statistics, schema, validator, data_check, *production_steps, transform,
          eval_examples, *model_components, production, evaluator, served_check, pusher, report]
