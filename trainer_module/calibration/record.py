"""The calibration record beside the SavedModel: temperature.json, and the feature support as
arrays (assets.extra is copied with the model and ignored by serving)."""
import io
import json
import os

import numpy as np
import tensorflow as tf

from trainer_module.calibration.distances import FeatureSupport, Support, parts

CALIBRATION_INFO_PATH = os.path.join("assets.extra", "temperature.json")
FEATURE_SUPPORT_PATH = os.path.join("assets.extra", "feature_support.npz")


def write_calibration_info(export_dir: str, info: dict) -> None:
  """Records T beside the SavedModel (assets.extra is copied with it, ignored by serving). A
  feature support, a constant of the serving graph, is also written as arrays
  (FEATURE_SUPPORT_PATH), so that numpy can recompute what the model serves (an ensemble's
  members, the benches)."""
  path = os.path.join(export_dir, CALIBRATION_INFO_PATH)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump({key: value for key, value in info.items() if key != "feature_support"}, f,
              indent=2)
  if info.get("feature_support") is not None:
    support = parts(info["feature_support"])
    arrays = {f"{field}_{index}": np.asarray(getattr(part, field))
              for index, part in enumerate(support) for field in FeatureSupport._fields}
    buffer = io.BytesIO()  # numpy's zip writer seeks; object storage files do not.
    np.savez(buffer, parts=len(support), **arrays)
    with tf.io.gfile.GFile(os.path.join(export_dir, FEATURE_SUPPORT_PATH), "wb") as f:
      f.write(buffer.getvalue())


def read_calibration_info(model_dir: str) -> dict:
  with tf.io.gfile.GFile(os.path.join(model_dir, CALIBRATION_INFO_PATH)) as f:
    return json.load(f)


def read_feature_support(model_dir: str) -> Support:
  """The feature support a model was exported with (write_calibration_info)."""
  with tf.io.gfile.GFile(os.path.join(model_dir, FEATURE_SUPPORT_PATH), "rb") as f:
    arrays = np.load(io.BytesIO(f.read()))
    support = tuple(FeatureSupport(*(arrays[f"{field}_{index}"] if field in ("class_means",
                                                                             "precision")
                                     else arrays[f"{field}_{index}"].item()
                                     for field in FeatureSupport._fields))
                    for index in range(int(arrays["parts"])))
  return support[0] if len(support) == 1 else support

