"""Scores a pushed SavedModel on raw serialized tf.Examples, as a serving client would.

`python -m reporting.score_pushed_model MODEL_DIR EXAMPLES_GLOB` prints a JSON line with the
accuracy. Run in a fresh process, it checks that the pushed model stands on its own.
"""
import json
import sys

import tensorflow as tf

from trainer_module.features import CLASS_IDS_KEY, LABEL_KEY

_BATCH = 256


def score(model_dir: str, examples_glob: str) -> dict:
  files = sorted(tf.io.gfile.glob(examples_glob))
  if not files:
    raise FileNotFoundError(f"No examples match {examples_glob}.")
  serve = tf.saved_model.load(model_dir).signatures["serving_default"]
  correct = total = 0
  for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH):
    labels = tf.io.parse_example(
        serialized, {LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)})[LABEL_KEY]
    predicted = serve(examples=serialized)[CLASS_IDS_KEY]
    correct += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int32)))
    total += int(tf.size(labels))
  return {"accuracy": correct / total, "correct": correct, "examples": total}


if __name__ == "__main__":
  print(json.dumps(score(sys.argv[1], sys.argv[2])))
