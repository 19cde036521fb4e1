"""EnsembleSelector: the hyper-deep ensemble of the trial Trainers' models as one Model for the
Evaluator, scored beside the best single trial for the report (docs/ensembles_and_transfer.md).
"""
import collections
import json
import os
from typing import Any, Dict, List

import numpy as np
import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import path_utils

from components import evaluation_set
from trainer_module import ensemble
from trainer_module.export import ENSEMBLE_FILE, write_record
from trainer_module.features import LABEL_KEY, PROBABILITIES_KEY

MEMBER_NAMES_KEY = "member_names"  # JSON list: the trial Trainers' ids, in input order.
_BATCH = 256


def member_key(index: int) -> str:
  return f"model_{index}"


def served_probabilities(model_dir: str, file_pattern: str):
  """(probabilities, labels, slice of each example) of a SavedModel on an evaluation split;
  the slice is (corruption, severity) for corrupted examples, None for clean ones."""
  files = sorted(tf.io.gfile.glob(file_pattern))
  if not files:
    raise FileNotFoundError(f"No examples match {file_pattern}.")
  serve = tf.saved_model.load(model_dir).signatures["serving_default"]
  spec = {LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
          evaluation_set.CORRUPTION_KEY: tf.io.FixedLenFeature([], tf.string, default_value=""),
          evaluation_set.SEVERITY_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0)}
  probabilities, labels, slices = [], [], []
  for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH):
    features = tf.io.parse_example(serialized, spec)
    probabilities.append(serve(examples=serialized)[PROBABILITIES_KEY].numpy())
    labels.append(features[LABEL_KEY].numpy())
    slices += [(c.decode(), int(s)) if c else None for c, s in zip(
        features[evaluation_set.CORRUPTION_KEY].numpy(),
        features[evaluation_set.SEVERITY_KEY].numpy())]
  return np.concatenate(probabilities), np.concatenate(labels), slices


def score_served(model_dir: str, evaluation_uri: str, num_bins: int) -> Dict[str, Any]:
  """Clean test accuracy/NLL/ECE, and cA/cNLL/cECE: the means over the corruption x severity
  slices, as the run report computes them from TFMA."""
  scores = {}
  test_pattern = os.path.join(evaluation_uri, f"Split-{evaluation_set.TEST}", "*")
  if tf.io.gfile.glob(test_pattern):
    probabilities, labels, _ = served_probabilities(model_dir, test_pattern)
    scores["test"] = ensemble.probability_metrics(probabilities, labels, num_bins)
  corrupted_pattern = os.path.join(evaluation_uri, f"Split-{evaluation_set.CORRUPTED}", "*")
  if tf.io.gfile.glob(corrupted_pattern):
    probabilities, labels, slices = served_probabilities(model_dir, corrupted_pattern)
    by_slice = collections.defaultdict(list)
    for index, slice_ in enumerate(slices):
      by_slice[slice_].append(index)
    per_slice = [ensemble.probability_metrics(probabilities[rows], labels[rows], num_bins)
                 for rows in by_slice.values()]
    scores["corrupted"] = {name: float(np.mean([m[name] for m in per_slice]))
                           for name in per_slice[0]}
  return scores


class EnsembleSelectorExecutor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
    names = json.loads(exec_properties[MEMBER_NAMES_KEY])
    members = [ensemble.Member(name=name, model_dir=path_utils.serving_model_path(
        artifact_utils.get_single_uri(input_dict[member_key(i)])))
        for i, name in enumerate(names)]
    examples = artifact_utils.get_single_instance(input_dict["examples"])
    eval_files, train_files = ([os.path.join(artifact_utils.get_split_uri([examples], split), "*")]
                               for split in ("eval", "train"))
    transform_output = artifact_utils.get_single_uri(input_dict["transform_graph"])
    export_dir = path_utils.serving_model_dir(
        artifact_utils.get_single_uri(output_dict["model"]))
    num_bins = exec_properties["num_bins"]
    record = ensemble.build_ensemble(
        members, eval_files, transform_output, export_dir,
        ensemble_size=exec_properties["ensemble_size"], objective=exec_properties["objective"],
        eval_batch_size=exec_properties["eval_batch_size"], num_bins=num_bins,
        temperature_fit=exec_properties["temperature_fit"],
        validation_corruption_examples=exec_properties["validation_corruption_examples"],
        train_files=train_files)
    evaluation_uri = artifact_utils.get_single_uri(input_dict["evaluation_set"])
    best = ensemble.best_single(record)
    record["comparison"] = {
        "best_single": {"name": best["name"], "eval": best["eval"],
                        **score_served(best["model_dir"], evaluation_uri, num_bins)},
        "ensemble": {"eval": record["eval"],
                     **score_served(export_dir, evaluation_uri, num_bins)}}
    write_record(export_dir, ENSEMBLE_FILE, record)


def _spec_class(num_members: int):
  """A ComponentSpec with one Model input per trial (TFX specs list their inputs by name)."""
  inputs = {member_key(i): ChannelParameter(type=standard_artifacts.Model)
            for i in range(num_members)}
  inputs.update(examples=ChannelParameter(type=standard_artifacts.Examples),
                transform_graph=ChannelParameter(type=standard_artifacts.TransformGraph),
                evaluation_set=ChannelParameter(type=standard_artifacts.Examples))
  return type("EnsembleSelectorSpec", (types.ComponentSpec,), {
      "PARAMETERS": {MEMBER_NAMES_KEY: ExecutionParameter(type=str),
                     "ensemble_size": ExecutionParameter(type=int),
                     "objective": ExecutionParameter(type=str),
                     "eval_batch_size": ExecutionParameter(type=int),
                     "num_bins": ExecutionParameter(type=int),
                     "temperature_fit": ExecutionParameter(type=str),
                     "validation_corruption_examples": ExecutionParameter(type=int),
                     # trainer_module's code hash: TFX's cache key does not cover imported code.
                     "trainer_module_fingerprint": ExecutionParameter(type=str)},
      "INPUTS": inputs,
      "OUTPUTS": {"model": ChannelParameter(type=standard_artifacts.Model)}})


def EnsembleSelector(trainers, examples, transform_graph, evaluation_set_channel,  # noqa: N802
                     ensemble_size: int, objective: str, eval_batch_size: int,
                     num_bins: int, temperature_fit: str, validation_corruption_examples: int,
                     fingerprint: str) -> base_component.BaseComponent:
  """The selector over these trial Trainers (their `model` outputs, in order)."""
  spec_class = _spec_class(len(trainers))
  component_class = type("EnsembleSelector", (base_component.BaseComponent,), {
      "SPEC_CLASS": spec_class, "__module__": __name__,
      "EXECUTOR_SPEC": executor_spec.ExecutorClassSpec(EnsembleSelectorExecutor)})
  spec = spec_class(
      **{member_key(i): trainer.outputs["model"] for i, trainer in enumerate(trainers)},
      examples=examples, transform_graph=transform_graph, evaluation_set=evaluation_set_channel,
      model=types.Channel(type=standard_artifacts.Model),
      member_names=json.dumps([trainer.id for trainer in trainers]),
      ensemble_size=ensemble_size, objective=objective, eval_batch_size=eval_batch_size,
      num_bins=num_bins, temperature_fit=temperature_fit,
      validation_corruption_examples=validation_corruption_examples,
      trainer_module_fingerprint=fingerprint)
  return component_class(spec=spec)
