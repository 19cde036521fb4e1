"""The serving SavedModel: class probabilities (temperature-scaled, and the raw softmax beside
them) and the predicted class for

- `serving_default`: serialized tf.Examples (what TFMA and tf.Example clients send);
- `serving_images`: raw PNG or JPEG bytes, one image per element.

Both apply the Transform graph (decode, normalise), so serving preprocesses exactly as
training did; the label and key are not needed and TFT prunes what depends on them. Bytes that
are not a 32x32 RGB PNG/JPEG fail that request with InvalidArgument naming the problem; the
model keeps serving.

The served model computes in float32 whatever policy trained it (the weights are float32 under
every policy): serving hardware may lack 16-bit units, and the probabilities TFMA and clients
read are float32. `assets.extra/precision.json` records what training ran in.
"""
import json
import os
from typing import Optional

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from trainer_module import temperature as temperature_scaling
from trainer_module.config import TrainerConfig
from trainer_module.features import (CLASS_IDS_KEY, IMAGE_KEY, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)
from trainer_module.model import wide_resnet

PRECISION_INFO_PATH = os.path.join("assets.extra", "precision.json")


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


def export_serving_model(model: keras.Model, tft_output: tft.TFTransformOutput,
                         export_dir: str, calibration: Optional[dict] = None,
                         precision: Optional[dict] = None) -> None:
  """`model` must compute in float32 (see float32_model). calibration: `temperature.calibrate`'s
  result; its T is baked into `probabilities` (T = 1 without it) and it is recorded in
  assets.extra, as is `precision` (distribution.Precision.to_dict())."""
  temperature = calibration["temperature"] if calibration else 1.0
  model.tft_layer = tft_output.transform_features_layer()  # Tracked, so saved with the model.
  image_spec = {IMAGE_KEY: tft_output.raw_feature_spec()[IMAGE_KEY]}

  def predict(raw_features):
    transformed = model.tft_layer(raw_features)
    logits = model(transformed[IMAGE_KEY], training=False)
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
  if precision:
    write_precision_info(export_dir, precision)


def write_precision_info(export_dir: str, precision: dict) -> None:
  path = os.path.join(export_dir, PRECISION_INFO_PATH)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(dict(precision, serving_policy="float32"), f, indent=2)


def read_precision_info(model_dir: str) -> Optional[dict]:
  """What write_precision_info recorded, or None for a model exported without it."""
  path = os.path.join(model_dir, PRECISION_INFO_PATH)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)
