"""A finished run's outputs read back for the benches: its models, transform graph, eval split
and evaluation set (EvaluationSetGen: clean eval and test, corrupted test), and a model's logits
on them.

MLMD records absolute artifact URIs. A run directory that was copied or moved (a CI artifact, a
colleague's run) keeps its artifacts under its own pipeline_root, so every recorded URI is read
relative to the given output directory's pipeline_root.
"""
import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from components.evaluation_set import EvaluationSet, read_evaluation_set  # noqa: F401
from pipeline.config import PipelineConfig
from local_runner.run_record import RunRecord
from trainer_module import data
from trainer_module.calibration import model_outputs
from trainer_module.config import TrainerConfig
from trainer_module.ensemble import LogMeanProbability
from trainer_module.export import ENSEMBLE_FILE, TRAINING_FILE, read_record
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, LABEL_KEY

_SERVING = "Format-Serving"


def local_uri(uri: str, config: PipelineConfig) -> str:
  """`uri` under config's pipeline_root (where the run directory is now)."""
  marker = f"/pipeline_root/{config.runner.pipeline_name}/"
  if marker not in uri:
    return uri
  local = os.path.join(config.runner.pipeline_root, uri.split(marker, 1)[1])
  if not tf.io.gfile.exists(local):
    raise FileNotFoundError(f"Artifact {uri} (recorded in {config.runner.metadata_path}) is not at "
                            f"{local}.")
  return local


@dataclasses.dataclass(frozen=True)
class LabelledSet:
  """Examples' logits (or features) with their labels and slice names ('' when unsliced)."""
  values: np.ndarray
  labels: np.ndarray
  slices: np.ndarray


def load_network(model_dir: str) -> keras.Model:
  """A serving SavedModel's network (transformed images -> logits; an ensemble's -> log mean
  probability)."""
  return keras.models.load_model(model_dir, compile=False,
                                 custom_objects={"LogMeanProbability": LogMeanProbability})


class Run:
  """The newest pipeline run recorded in an output directory."""

  def __init__(self, output_dir: str):
    self.config = PipelineConfig().replace(output_dir=output_dir)
    self.record = RunRecord(self.config)

  def uri(self, key: str, producer: Optional[str] = None) -> str:
    artifact = self.record.latest_output(key, producer)
    if artifact is None:
      raise FileNotFoundError(
          f"No {key!r} output{' of ' + producer if producer else ''} in "
          f"{self.config.runner.metadata_path}; is {self.config.runner.output_dir} a "
          "finished run?")
    return local_uri(artifact.uri, self.config)

  def model_dir(self, producer: Optional[str] = None) -> str:
    """The serving model of `producer`; by default the candidate the run evaluated."""
    if producer is None:
      candidate = self.record.candidate_model()
      if candidate is None:
        raise FileNotFoundError(f"No trained model in {self.config.runner.metadata_path}.")
      return os.path.join(local_uri(candidate.uri, self.config), _SERVING)
    return os.path.join(self.uri("model", producer), _SERVING)

  def trainer_config(self, model_dir: str) -> TrainerConfig:
    """What the model was trained with; for an ensemble, its first trial's config."""
    training = read_record(model_dir, TRAINING_FILE)
    if training is None:
      first = read_record(model_dir, ENSEMBLE_FILE)["trials"][0]["model_dir"]
      training = read_record(local_uri(first, self.config), TRAINING_FILE)
    return TrainerConfig.from_dict(training["trainer_config"])

  def tft_output(self) -> tft.TFTransformOutput:
    return tft.TFTransformOutput(self.uri("transform_graph"))

  def split_batches(self, tft_output: tft.TFTransformOutput, batch_size: int,
                    split: str = "eval") -> tf.data.Dataset:
    """A transformed split's clean images as the Trainer's temperature fit reads the eval
    split: (images, labels, weights) batches, padding weighted 0."""
    files = os.path.join(self.uri("transformed_examples"), f"Split-{split}", "*")
    return data.eval_batches([files], tft_output.transformed_feature_spec(), batch_size)

  def evaluation_set(self) -> EvaluationSet:
    return read_evaluation_set(self.uri("evaluation_set"))


def transformed_batches(tft_output: tft.TFTransformOutput, pngs: np.ndarray, labels: np.ndarray,
                        batch_size: int) -> tf.data.Dataset:
  """(images, labels) batches of PNGs transformed as serving transforms them."""
  layer = tft_output.transform_features_layer()
  images = [layer({IMAGE_KEY: tf.constant(pngs[start:start + batch_size])})[IMAGE_KEY].numpy()
            for start in range(0, len(pngs), batch_size)]
  return tf.data.Dataset.from_tensor_slices((np.concatenate(images), labels)).batch(batch_size)


def labelled(model, batches: tf.data.Dataset, slices: np.ndarray) -> LabelledSet:
  """`model`'s outputs on (images, labels[, weights]) batches, padding left out."""
  values, labels = model_outputs.model_logits(model, batches)
  return LabelledSet(values, labels, np.asarray(slices))
