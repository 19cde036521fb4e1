"""The serving SavedModel: tf.Examples (`serving_default`) or image bytes (`serving_images`) in,
preprocessed by the Transform graph as in training; temperature-scaled and raw probabilities,
class index and name out, in float32. docs/standalone_trainer.md, "The serving model".
"""
import json
import os
from typing import Mapping, Optional, Sequence

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from trainer_module import image_format
from trainer_module.calibration import model_outputs, record, registry, serving
from trainer_module.config import TrainerConfig
from trainer_module.class_names import CLASS_NAMES_FILE, index_names
from trainer_module.features import (CLASS_IDS_KEY, CLASS_NAMES_KEY, IMAGE_KEY,
                                     PROBABILITIES_KEY, UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.model import wide_resnet



def float32_model(model: keras.Model, config: TrainerConfig) -> keras.Model:
  """`model` itself when it computes in float32, else its weights in a float32 copy."""
  if all(layer.compute_dtype == "float32" for layer in model.layers):
    return model
  policy = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy("float32")
  try:
    copy = wide_resnet(config)
  finally:
    keras.mixed_precision.set_global_policy(policy)
  copy.set_weights(model.get_weights())
  return copy


# In assets.extra: the step, trainer config and warm start the model was trained with.
TRAINING_FILE = "training.json"
ENSEMBLE_FILE = "ensemble.json"  # In assets.extra of an ensemble: its members and selection.
# In assets.extra: the precision policy training ran in (distribution.Precision.to_dict()) and
# the one serving computes in.
PRECISION_FILE = "precision.json"


def assert_parseable_examples(serialized: tf.Tensor, spec: dict) -> tf.Operation:
  """Fails with InvalidArgument naming the batch positions that do not parse under `spec`.

  ParseExample's own error quotes the raw bytes, which are not UTF-8 for garbage input (a
  Python client then gets a UnicodeDecodeError instead of the error); here each element is
  parsed in a tf.data pipeline that drops failures, and the missing positions are reported.
  """
  positions = tf.range(tf.size(serialized, out_type=tf.int64))
  parsed = (tf.data.Dataset.from_tensor_slices((positions, serialized))
            .map(lambda i, s: (i, tf.io.parse_single_example(s, spec)))
            .ignore_errors())
  parsed_mask = parsed.reduce(
      tf.zeros_like(positions, tf.bool),
      lambda mask, element: tf.logical_or(mask, tf.equal(positions, element[0])) |
      tf.equal(tf.size(element[1][IMAGE_KEY]), -1))  # Uses the parse: it is not pruned.
  return tf.debugging.Assert(tf.reduce_all(parsed_mask), [
      f"Not a serialized tf.Example with one bytes value in feature {IMAGE_KEY} at batch "
      "positions",
      tf.boolean_mask(positions, tf.logical_not(parsed_mask))], summarize=10)


def one_batch(tensor: tf.Tensor, signature: str, what: str) -> tf.Tensor:
  """`tensor` as the [batch] vector a signature takes, after failing with InvalidArgument
  saying so when it is not one: a loaded signature does not check the shape it declares, so a
  [batch, 1] request or a single string would otherwise fail deep in the graph."""
  check = tf.debugging.assert_rank(tensor, 1, message=f"{signature} takes a 1-D batch of {what} "
                                   "(shape [batch])")
  with tf.control_dependencies([check]):
    return tf.reshape(tensor, [-1])  # Cannot fail first and hide the check's message.


def export_serving_model(model: keras.Model, tft_output: tft.TFTransformOutput,
                         export_dir: str, calibration: Optional[dict] = None,
                         records: Mapping[str, dict] = {}, features_model=None,
                         class_names: Optional[Sequence[str]] = None) -> None:
  """model maps transformed images to logits (an ensemble: to log mean probabilities) and must
  compute in float32 (see float32_model). calibration: a calibration method's fit; its
  temperatures are baked into `probabilities` (T = 1 without it). A method that reads feature
  distances measures them in the space of `features_model`, by default the network's
  penultimate_model, which must share model's graph; the method's served_scores (the distance
  score, the detail score) are served beside the probabilities. The calibration is recorded in
  assets.extra, as is each of `records` ({file name: JSON value}), copied with the model and
  ignored by serving. class_names: in index order (default '0', '1',
  ...); served beside the probabilities and recorded in assets.extra/CLASS_NAMES_FILE."""
  method = registry.recorded(calibration)
  reads_features = method is not None and method.needs_feature_distances
  served_scores = method.served_scores if method is not None else ()
  model.tft_layer = tft_output.transform_features_layer()  # Tracked, so saved with the model.
  image_spec = {IMAGE_KEY: tft_output.raw_feature_spec()[IMAGE_KEY]}
  num_classes = model.output_shape[-1]
  class_names = list(class_names or index_names(num_classes))
  if len(class_names) != num_classes:
    raise ValueError(f"{len(class_names)} class names for a model of {num_classes} classes.")
  if reads_features:
    features_model = features_model or model_outputs.penultimate_model(model)
  network = (model if not reads_features else
             keras.Model(model.inputs, [model.output, features_model.output]))

  def predict(encoded_images):
    with tf.control_dependencies([image_format.assert_served_headers(encoded_images)]):
      encoded_images = tf.identity(encoded_images)  # Nothing is decoded before the check.

    def logits_and_temperatures():
      transformed = model.tft_layer({IMAGE_KEY: encoded_images})
      outputs = network(transformed[IMAGE_KEY], training=False)
      logits = tf.cast(outputs[0] if reads_features else outputs, tf.float32)
      if method is None:
        return logits, serving.constant_temperatures(logits, 1.0)
      temperatures, scores = method.served_temperatures(
          calibration, logits, outputs[1] if reads_features else None, transformed[IMAGE_KEY])
      return (logits, temperatures) + tuple(tf.cast(scores[key], tf.float32)
                                            for key in served_scores)

    # An empty batch gets empty outputs (the convolutions reject a batch of 0 images).
    empty = (tf.zeros([0, num_classes], tf.float32), tf.zeros([0], tf.float32))
    outputs = tf.cond(tf.size(encoded_images) > 0, logits_and_temperatures,
                      lambda: empty + tuple(tf.zeros([0], tf.float32) for _ in served_scores))
    logits, temperatures = outputs[:2]
    probabilities = tf.nn.softmax(logits / temperatures[:, tf.newaxis])
    class_ids = tf.argmax(probabilities, axis=-1)
    served = {PROBABILITIES_KEY: probabilities, CLASS_IDS_KEY: class_ids,
              CLASS_NAMES_KEY: tf.gather(tf.constant(class_names), class_ids),
              UNCALIBRATED_PROBABILITIES_KEY: tf.nn.softmax(logits)}
    served.update(zip(served_scores, outputs[2:]))
    return served

  # No AutoGraph: nothing here branches in Python on a tensor (tf.cond is explicit), and
  # converting every Keras layer's call was most of the export's time.
  # Any shape is taken, and anything but [batch] refused by one_batch with a clear message.
  @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="examples")],
               autograph=False)
  def serve_tf_examples(serialized):
    serialized = one_batch(serialized, "serving_default", "serialized tf.Examples")
    with tf.control_dependencies([assert_parseable_examples(serialized, image_spec)]):
      serialized = tf.identity(serialized)
    return predict(tf.io.parse_example(serialized, image_spec)[IMAGE_KEY])

  @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="images")],
               autograph=False)
  def serve_images(encoded_images):
    return predict(one_batch(encoded_images, "serving_images", "encoded JPEG or PNG images"))

  # Without per-layer traces: the network is built-in layers only, which Keras rebuilds from
  # their configs on load (ensemble members, trainer_module/ensemble.py); tracing every layer's
  # call for the SavedModel cost more than the rest of the export.
  model.save(export_dir, save_format="tf", save_traces=False,
             signatures={"serving_default": serve_tf_examples, "serving_images": serve_images})
  if calibration:
    record.write_calibration_info(export_dir, calibration)
  for name, value in {**records, CLASS_NAMES_FILE: {"class_names": class_names}}.items():
    write_record(export_dir, name, value)


def write_record(export_dir: str, name: str, value) -> None:
  path = os.path.join(export_dir, "assets.extra", name)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(value, f, indent=2, sort_keys=True)


def read_record(model_dir: str, name: str) -> Optional[dict]:
  """An assets.extra record of a SavedModel, or None when it has none."""
  path = os.path.join(model_dir, "assets.extra", name)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)
