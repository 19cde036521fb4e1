"""The serving SavedModel: serialized tf.Examples in, class probabilities out.

The Transform graph (decode, normalise) is part of the signature, so serving applies exactly
the preprocessing the model was trained with; the label is not needed and TFT prunes it.
"""
import tensorflow as tf
from absl import logging as absl_logging
import tensorflow_transform as tft
import tf_keras as keras

from trainer_module.features import CLASS_IDS_KEY, IMAGE_KEY, PROBABILITIES_KEY


def export_serving_model(model: keras.Model, tft_output: tft.TFTransformOutput,
                         export_dir: str) -> None:
  model.tft_layer = tft_output.transform_features_layer()  # Tracked, so saved with the model.
  image_spec = {IMAGE_KEY: tft_output.raw_feature_spec()[IMAGE_KEY]}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve_tf_examples(serialized):
    raw = tf.io.parse_example(serialized, image_spec)
    transformed = model.tft_layer(raw)
    probabilities = tf.nn.softmax(model(transformed[IMAGE_KEY], training=False))
    return {PROBABILITIES_KEY: probabilities, CLASS_IDS_KEY: tf.argmax(probabilities, axis=-1)}

  verbosity = absl_logging.get_verbosity()
  try:
    model.save(export_dir, save_format="tf",
               signatures={"serving_default": serve_tf_examples})
  finally:
    # tf_keras' SavedModel writer lowers absl's verbosity and leaves it there, which would
    # silence the orchestrator's progress for every later component in this process.
    absl_logging.set_verbosity(verbosity)
