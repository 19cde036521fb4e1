"""Scores a SavedModel on raw serialized tf.Examples in a fresh process, as a serving client would.

`python -m components.serving_client MODEL_DIR EXAMPLES_GLOB` prints one JSON line.
"""
import json
import sys

import numpy as np
import tensorflow as tf

from storage import object_storage
from trainer_module.features import CLASS_IDS_KEY, LABEL_KEY, PROBABILITIES_KEY

SIGNATURE = "serving_default"
INPUT_KEY = "examples"  # The serving signature's input: a batch of serialized tf.Examples.
SUM_TOLERANCE = 1e-3  # How far from 1 a served probability vector may sum.
_BATCH = 256


def score(model_dir: str, examples_glob: str) -> dict:
  files = sorted(tf.io.gfile.glob(examples_glob))
  if not files:
    raise FileNotFoundError(f"No examples match {examples_glob}.")
  serve = tf.saved_model.load(model_dir).signatures[SIGNATURE]
  inputs = sorted(serve.structured_input_signature[1])
  if inputs != [INPUT_KEY]:
    raise ValueError(f"{model_dir}: signature '{SIGNATURE}' takes {inputs}, not the one input "
                     f"'{INPUT_KEY}' (serialized tf.Examples) a serving client sends")
  correct = total = non_finite = not_normalised = 0
  for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH):
    labels = tf.io.parse_example(
        serialized, {LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)})[LABEL_KEY]
    outputs = serve(**{INPUT_KEY: serialized})
    probabilities = outputs[PROBABILITIES_KEY].numpy()
    finite = np.all(np.isfinite(probabilities), axis=-1)
    non_finite += int(np.sum(~finite))
    not_normalised += int(np.sum(finite & (np.abs(probabilities.sum(-1) - 1) > SUM_TOLERANCE)))
    correct += int(tf.reduce_sum(tf.cast(outputs[CLASS_IDS_KEY] == labels, tf.int32)))
    total += int(tf.size(labels))
  return {"accuracy": correct / total if total else None, "correct": correct, "examples": total,
          "non_finite": non_finite, "not_normalised": not_normalised}


def main(argv) -> int:
  model_dir, examples_glob = argv
  if object_storage.is_object_store_uri(model_dir) or object_storage.is_object_store_uri(
      examples_glob):
    object_storage.configure()
  print(json.dumps(score(model_dir, examples_glob)))
  return 0


if __name__ == "__main__":
  object_storage.exit_after(lambda: main(sys.argv[1:]))
