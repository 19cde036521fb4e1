"""The serving SavedModel: class probabilities (temperature-scaled, and the raw softmax beside
them) and the predicted class for

- `serving_default`: serialized tf.Examples (what TFMA and tf.Example clients send);
- `serving_images`: raw PNG or JPEG bytes, one image per element.

Both apply the Transform graph (decode, normalise), so serving preprocesses exactly as
training did; the label and key are not needed and TFT prunes what depends on them. Bytes that
are not a 32x32 RGB PNG/JPEG fail that request with InvalidArgument naming the problem; the
model keeps serving.
"""
import json
import os
from typing import Mapping, Optional

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from trainer_module import temperature as temperature_scaling
from trainer_module.features import (CLASS_IDS_KEY, IMAGE_KEY, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)


TRAINER_CONFIG_FILE = "trainer_config.json"  # In assets.extra: what the model was trained with.
ENSEMBLE_FILE = "ensemble.json"  # In assets.extra of an ensemble: its members and selection.


def export_serving_model(model: keras.Model, tft_output: tft.TFTransformOutput,
                         export_dir: str, calibration: Optional[dict] = None,
                         records: Mapping[str, dict] = {}) -> None:
  """model maps transformed images to logits (an ensemble: to log mean probabilities).
  calibration: `temperature.calibrate`'s result; its T is baked into `probabilities`
  (T = 1 without it) and it is recorded in assets.extra, as is each of `records`
  ({file name: JSON value}), copied with the model and ignored by serving."""
  temperature = calibration["temperature"] if calibration else 1.0
  model.tft_layer = tft_output.transform_features_layer()  # Tracked, so saved with the model.
  image_spec = {IMAGE_KEY: tft_output.raw_feature_spec()[IMAGE_KEY]}

  def predict(raw_features):
    transformed = model.tft_layer(raw_features)
    logits = tf.cast(model(transformed[IMAGE_KEY], training=False), tf.float32)  # Mixed precision.
    probabilities = tf.nn.softmax(logits / temperature)
    return {PROBABILITIES_KEY: probabilities, CLASS_IDS_KEY: tf.argmax(probabilities, axis=-1),
            UNCALIBRATED_PROBABILITIES_KEY: tf.nn.softmax(logits)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve_tf_examples(serialized):
    return predict(tf.io.parse_example(serialized, image_spec))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
  def serve_images(encoded_images):
    return predict({IMAGE_KEY: encoded_images})

  model.save(export_dir, save_format="tf",
             signatures={"serving_default": serve_tf_examples, "serving_images": serve_images})
  if calibration:
    temperature_scaling.write_calibration_info(export_dir, calibration)
  for name, value in records.items():
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
