"""The pipeline graph, as one function of the run's config.

ExampleGen -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ValidationGate ->
Transform -> Trainer -> Evaluator (against the ProductionModel) -> Pusher, and
ValidationGate -> EvaluationSetGen (clean eval/test + corrupted test images) -> Evaluator.
With hyper_trials > 1 the Trainer is hyper_trials independent trial Trainers whose models an
EnsembleSelector turns into one ensemble model, the candidate of ProductionModel, Evaluator and
Pusher.

With warm_start=production, a second ProductionModel (WarmStartModel, no candidate) gives the
Trainer the model in production as its base_model.
"""
from __future__ import annotations

import hashlib
import os

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from components import evaluation_set, reference_corruptions
from components.ensemble import EnsembleSelector
from components.evaluation_set import EvaluationSetGen
from components.example_gen import ImageDatasetExampleGen
from components.evaluator import Evaluator
from components.production_model import ProductionModel
from components.pusher import VersionedPusherExecutor
from components.validation_gate import ValidationGate
from kubeflow import cluster
from pipeline.config import PipelineConfig, robustness_source
from pipeline.evaluation import eval_config
from trainer_module import preprocessing
from trainer_module.config import WARM_START_FROM_PRODUCTION

WARM_START_MODEL_ID = "WarmStartModel"
_REPOSITORY_DIR = os.path.dirname(os.path.dirname(__file__))
_TRAINER_MODULE_DIR = os.path.join(_REPOSITORY_DIR, "trainer_module")
# What the Trainer imports from components/: the validation corruptions of its temperature fit.
_TRAINER_COMPONENT_FILES = ("reference_corruptions.py", "evaluation_set.py")


def trainer_module_fingerprint() -> str:
  """A hash of trainer_module's code (and the component modules it runs). Transform and Trainer
  load it by import path, which TFX's cache key does not cover, so the fingerprint goes into
  their config: edit the code, and they run again instead of reusing a stale cached result."""
  digest = hashlib.sha256()
  paths = [os.path.join(_TRAINER_MODULE_DIR, name) for name in sorted(
      os.listdir(_TRAINER_MODULE_DIR)) if name.endswith(".py") and not name.endswith("_test.py")]
  paths += [os.path.join(_REPOSITORY_DIR, "components", name) for name in _TRAINER_COMPONENT_FILES]
  for path in paths:
    digest.update(os.path.relpath(path, _REPOSITORY_DIR).encode())
    with open(path, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def example_gen(config: PipelineConfig):
  if config.dataset == "tfrecord":
    splits = ["train", "eval"]
    # The optional test split is only scored locally; a cluster run reads train and eval.
    if config.kubeflow is None and os.path.isdir(os.path.join(config.tfrecord_dir, "test")):
      splits.append("test")
    return tfx.components.ImportExampleGen(
        input_base=cluster.tfrecord_input_base(config),
        input_config=tfx.proto.Input(
            splits=[tfx.proto.Input.Split(name=s, pattern=f"{s}/*") for s in splits]))
  return ImageDatasetExampleGen(source=config.dataset, eval_fraction=config.eval_fraction,
                                test_fraction=config.test_fraction,
                                tfds_data_dir=config.tfds_data_dir)


def transform_component(config: PipelineConfig, examples, schema, fingerprint: str):
  """Decode, normalise and (with --augmix) write AugMix views, on Beam."""
  return tfx.components.Transform(
      examples=examples,
      schema=schema,
      preprocessing_fn="trainer_module.preprocessing.preprocessing_fn",
      splits_config=tfx.proto.SplitsConfig(analyze=["train"], transform=["train", "eval"]),
      custom_config={"transform": config.trainer.transform_options(),
                     "trainer_module_fingerprint": fingerprint},
      force_tf_compat_v1=preprocessing.FORCE_TF_COMPAT_V1,
      disable_statistics=True)  # StatisticsGen already covers the raw data.


def evaluation_set_examples(config: PipelineConfig):
  """The Evaluator's input size (clean eval and test, and the corrupted slices), when known."""
  if config.input_examples is None:
    return None
  test = round(config.input_examples * config.test_fraction)
  per_slice = min(config.examples_per_corruption, test) if config.examples_per_corruption else test
  clean = round(config.input_examples * (config.eval_fraction + config.test_fraction))
  return clean + per_slice * len(config.corruptions) * len(reference_corruptions.SEVERITIES)


def input_steps(config: PipelineConfig, fingerprint: str) -> tuple:
  """ExampleGen, StatisticsGen, ImportSchemaGen, ExampleValidator, ValidationGate, Transform:
  the steps over the input data, the Beam ones with the engine for its size."""
  examples = example_gen(config)
  statistics = tfx.components.StatisticsGen(examples=examples.outputs["examples"])
  schema = tfx.components.ImportSchemaGen(schema_file=cluster.schema_file(config))
  validator = tfx.components.ExampleValidator(statistics=statistics.outputs["statistics"],
                                              schema=schema.outputs["schema"])
  gate = ValidationGate(examples=examples.outputs["examples"],
                        anomalies=validator.outputs["anomalies"])
  transform = transform_component(config, examples.outputs["examples"], schema.outputs["schema"],
                                  fingerprint)
  transform.add_upstream_node(gate)
  for step in (examples, statistics, gate):
    step.with_beam_pipeline_args(config.beam_step_args(config.input_examples))
  transform.with_beam_pipeline_args(config.beam_step_args(transform_images(config)))
  return examples, statistics, schema, validator, gate, transform


def transform_images(config: PipelineConfig):
  """The images Transform makes, when known: each input image and its AugMix views (the view
  sets it writes); AugMix is most of Transform's work (bench/beam_modes.py)."""
  if config.input_examples is None:
    return None
  options = config.trainer.transform_options()
  return config.input_examples * (1 + options["num_views"] * options["view_sets"])


def create_pipeline(config: PipelineConfig) -> tfx.dsl.Pipeline:
  fingerprint = trainer_module_fingerprint()
  examples, statistics, schema, validator, gate, transform = input_steps(config, fingerprint)

  # The Evaluator's ProductionModel depends on the Trainer (its candidate), so the Trainer's
  # base model comes from an instance of its own, resolved before training.
  warm_start_model = None
  if config.trainer.warm_start == WARM_START_FROM_PRODUCTION:
    warm_start_model = ProductionModel(
        serving_directory=config.serving_model_dir).with_id(WARM_START_MODEL_ID)
  trainers = [cluster.trainer(
      config, fingerprint, trial,
      base_model=warm_start_model.outputs["model"] if warm_start_model else None,
      examples=transform.outputs["transformed_examples"],
      transform_graph=transform.outputs["transform_graph"],
      schema=schema.outputs["schema"],
      train_args=tfx.proto.TrainArgs(splits=["train"]),
      eval_args=tfx.proto.EvalArgs(splits=["eval"])) for trial in range(config.hyper_trials)]
  if len(trainers) > 1:  # Independent tasks: a cluster runs them in parallel.
    trainers = [t.with_id(f"Trainer_trial_{i}") for i, t in enumerate(trainers)]

  eval_examples = EvaluationSetGen(
      examples=examples.outputs["examples"], source=robustness_source(config.dataset),
      corruption_names=",".join(config.corruptions),
      examples_per_corruption=config.examples_per_corruption,
      tfds_data_dir=config.tfds_data_dir or "", workers=config.corruption_workers)
  eval_examples.add_upstream_node(gate)

  model_components = list(trainers)
  if len(trainers) > 1:
    model_components.append(EnsembleSelector(
        trainers, transform.outputs["transformed_examples"], transform.outputs["transform_graph"],
        eval_examples.outputs["evaluation_set"], ensemble_size=config.ensemble_size,
        objective=config.ensemble_objective, eval_batch_size=config.trainer.eval_batch_size,
        num_bins=config.trainer.num_bins, fingerprint=fingerprint))
  model = model_components[-1].outputs["model"]

  production = ProductionModel(serving_directory=config.serving_model_dir, candidate=model)

  evaluator = Evaluator(
      examples=eval_examples.outputs["evaluation_set"],
      model=model,
      baseline_model=production.outputs["model"],
      example_splits=[evaluation_set.EVAL, evaluation_set.TEST, evaluation_set.CORRUPTED],
      eval_config=eval_config(config)).with_beam_pipeline_args(
          config.beam_step_args(evaluation_set_examples(config)))

  pusher = tfx.components.Pusher(
      model=model,
      model_blessing=evaluator.outputs["blessing"],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=config.serving_model_dir)),
      custom_executor_spec=executor_spec.ExecutorClassSpec(VersionedPusherExecutor))

  return tfx.dsl.Pipeline(
      pipeline_name=config.pipeline_name,
      pipeline_root=config.pipeline_root,
      components=[examples, statistics, schema, validator, gate, transform, eval_examples,
                  *([warm_start_model] if warm_start_model else []), *model_components,
                  production, evaluator, pusher],
      enable_cache=config.enable_cache,
      metadata_connection_config=cluster.metadata_connection(config),
      beam_pipeline_args=config.beam_pipeline_args())
