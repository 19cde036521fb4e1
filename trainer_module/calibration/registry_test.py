"""The methods by name: the flag's values, what each method needs, and no other place that
compares a method name."""
import ast
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from trainer_module.calibration import registry
from trainer_module.calibration.method import HeldOut
from trainer_module.config import TrainerConfig

CODE_PACKAGES = ("configs", "storage", "trainer_module", "components", "pipeline", "reporting",
                 "local_runner", "kubeflow", "bench")


def test_the_flag_takes_the_three_choices_and_refuses_others_naming_the_flag():
  assert registry.NAMES == ("distance_detail_curve", "validation_corruptions", "clean")
  for name in registry.NAMES:
    config = TrainerConfig().replace(temperature_fit=name)
    assert config.calibration.temperature_fit == registry.get(name).name == name
  with pytest.raises(ValueError, match=r"temperature_fit='platt': must be one of \("):
    TrainerConfig().replace(temperature_fit="platt")
  with pytest.raises(ValueError, match=r"temperature_fit='platt': must be one of \("):
    registry.get("platt")
  for removed in ("in_support", "distance_curve", "clean_and_augmix"):
    with pytest.raises(ValueError, match=f"temperature_fit='{removed}': must be one of"):
      TrainerConfig().replace(temperature_fit=removed)


def test_what_each_method_reads_and_where_it_may_serve():
  needs = {name: (m.needs_validation_corruptions, m.needs_feature_distances,
                  m.calibrated_selection, m.served_scores, m.reads_images)
           for name, m in registry.METHODS.items()}
  assert needs == {"validation_corruptions": (True, False, False, (), False),
                   "clean": (False, False, True, (), False),
                   "distance_detail_curve": (True, True, True,
                                             ("distance_score", "detail_score"), True)}


def test_a_fit_is_given_exactly_the_sets_its_method_reads():
  with pytest.raises(ValueError, match="temperature_fit=clean does not read the validation"):
    registry.get("clean").fit(None, HeldOut([], validation_corrupted=object()))
  with pytest.raises(ValueError, match="temperature_fit=validation_corruptions needs the "
                                       "validation corruptions of the eval images"):
    registry.get("validation_corruptions").fit(None, HeldOut([]))
  with pytest.raises(ValueError, match="temperature_fit=distance_detail_curve needs the train "
                                       "split's batches"):
    registry.get("distance_detail_curve").fit(None, HeldOut([], validation_corrupted=object()))


def test_a_record_without_a_method_name_serves_its_one_temperature():
  assert registry.recorded({}) is None and registry.recorded(None) is None
  assert registry.recorded({"temperature": 2.0}) is registry.get("clean")
  np.testing.assert_array_equal(registry.served_calibration({"temperature": 2.0}, None,
                                                            np.zeros((3, 4))), [2.0] * 3)
  np.testing.assert_array_equal(registry.served_calibration({}, None, np.zeros((2, 4))), [1, 1])


def test_a_record_of_a_method_this_version_does_not_serve_is_refused_by_name():
  with pytest.raises(ValueError, match=r"names temperature_fit='in_support', which this version "
                                       r"does not serve \(it serves \('distance_detail_curve'"):
    registry.recorded({"temperature_fit": "in_support", "temperature": 0.4})


def test_checking_a_name_does_not_load_tensorflow():
  """pipeline.config validates the flag; its --help must not wait for TensorFlow."""
  code = ("import sys; import pipeline.config; from trainer_module.calibration import registry; "
          "print('tensorflow' in sys.modules)")
  done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=REPO), timeout=300, check=True)
  assert done.stdout.strip() == "False"


def _method_name_comparisons(path):
  """(line, name) of each comparison (==, !=, in, not in) of a method name in `path`."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      for operand in [node.left] + node.comparators:
        items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
        for item in items:
          if isinstance(item, ast.Constant) and item.value in registry.NAMES:
            yield node.lineno, item.value


def test_no_code_outside_the_registry_compares_a_method_name():
  calibration_dir = os.path.join(REPO, "trainer_module", "calibration")
  found = []
  for package in CODE_PACKAGES:
    for root, _, files in os.walk(os.path.join(REPO, package)):
      for name in files:
        path = os.path.join(root, name)
        if (name.endswith(".py") and not name.endswith("_test.py") and name != "conftest.py"
            and not root.startswith(calibration_dir)):
          found += [f"{os.path.relpath(path, REPO)}:{line} compares {value!r}"
                    for line, value in _method_name_comparisons(path)]
  assert not found, "\n".join(found)


def test_the_comparison_check_sees_a_tuple_membership(tmp_path):
  module = tmp_path / "module.py"
  module.write_text("def f(fit):\n  return fit in ('validation_corruptions', 'clean')\n")
  assert list(_method_name_comparisons(str(module))) == [(2, "validation_corruptions"),
                                                        (2, "clean")]
