"""The serving SavedModel: class probabilities (temperature-scaled, and the raw softmax beside
them) and the predicted class for

- `serving_default`: serialized tf.Examples (what TFMA and tf.Example clients send);
- `serving_images`: raw PNG or JPEG bytes, one image per element.

Both apply the Transform graph (decode, normalise), so serving preprocesses exactly as
training did; the label and key are not needed and TFT prunes what depends on them. Bytes that
are not a 32x32 RGB PNG/JPEG fail that request with InvalidArgument naming the problem; the
model keeps serving.
"""
from typing import Optional

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from trainer_module import temperature as temperature_scaling
from trainer_module.features import (CLASS_IDS_KEY, IMAGE_KEY, PROBABILITIES_KEY,
                                     UNCALIBRATED_PROBABILITIES_KEY)


def export_serving_model(model: keras.Model, tft_output: tft.TFTransformOutput,
                         export_dir: str, calibration: Optional[dict] = None) -> None:
  """calibration: `temperature.calibrate`'s result; its T is baked into `probabilities`
  (T = 1 without it) and it is recorded in assets.extra."""
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
