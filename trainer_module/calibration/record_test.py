"""The calibration record: temperature.json without the support, the support's arrays beside it."""
import json
import os

import numpy as np

from trainer_module.calibration import record
from trainer_module.calibration.distances import support_from_features


def test_a_members_union_support_is_read_back_part_by_part_and_left_out_of_the_json(tmp_path):
  rng = np.random.default_rng(3)
  train, labels, evaluated = rng.normal(size=(60, 5)), np.arange(60) % 3, rng.normal(size=(20, 5))
  support = (support_from_features(train[:, :2], labels, evaluated[:, :2]),
             support_from_features(train[:, 2:], labels, evaluated[:, 2:], start=2))
  info = {"temperature_fit": "distance_detail_curve", "temperature": 0.5,
          "feature_support": support, "support_radius": [part.radius for part in support]}
  record.write_calibration_info(str(tmp_path), info)
  with open(os.path.join(tmp_path, record.CALIBRATION_INFO_PATH)) as f:
    assert json.load(f) == {key: value for key, value in info.items() if key != "feature_support"}
  assert record.read_calibration_info(str(tmp_path))["support_radius"] == info["support_radius"]
  read = record.read_feature_support(str(tmp_path))
  assert len(read) == 2
  for written, back in zip(support, read):
    for field in written._fields:
      np.testing.assert_array_equal(getattr(back, field), getattr(written, field))
    assert back.start == written.start and isinstance(back.radius, float)


def test_a_single_support_is_read_back_as_one_part(tmp_path):
  rng = np.random.default_rng(4)
  support = support_from_features(rng.normal(size=(40, 3)), np.arange(40) % 2,
                                  rng.normal(size=(10, 3)))
  record.write_calibration_info(str(tmp_path), {"temperature": 1.0, "feature_support": support})
  assert record.read_feature_support(str(tmp_path)).radius == support.radius
