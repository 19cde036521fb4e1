"""Hyper-deep ensemble trials: reproducible draws inside UB's ranges, scaled by the train size."""
import math

import pytest

from test_support.tiny_config import TINY_NETWORK, plain_trainer
from trainer_module.config import (HYPER_L2_GROUPS, HYPER_L2_RANGE, HYPER_LABEL_SMOOTHING_RANGE,
                                   HYPER_SEED_RANGE, TrainerConfig, hyper_trials)

BASE = plain_trainer(**TINY_NETWORK, seed=7, bn_l2=3e-4)


def test_trial_zero_is_the_configured_model_and_one_trial_is_no_sweep():
  assert hyper_trials(BASE, 1) == [BASE]
  assert hyper_trials(BASE, 5)[0] == BASE


def test_draws_are_reproducible_from_the_pipeline_seed_and_differ_between_trials():
  first, again = hyper_trials(BASE, 6), hyper_trials(BASE, 6)
  assert first == again
  assert hyper_trials(BASE, 3) == first[:3]  # More trials do not change the earlier ones.
  assert len({trial.training.seed for trial in first}) == 6
  assert len({trial.model.label_smoothing for trial in first}) == 6
  other_seed = hyper_trials(plain_trainer(**TINY_NETWORK, seed=8, bn_l2=3e-4), 6)
  assert ([t.model.label_smoothing for t in other_seed[1:]]
          != [t.model.label_smoothing for t in first[1:]])


def test_draws_are_inside_their_ranges_and_bn_l2_stays_fixed():
  trials = hyper_trials(BASE, 200)[1:]
  for trial in trials:
    assert trial.model.l2_per_train_example and trial.model.bn_l2 == 3e-4
    assert HYPER_SEED_RANGE[0] <= trial.training.seed < HYPER_SEED_RANGE[1]
    low, high = HYPER_LABEL_SMOOTHING_RANGE
    assert low <= trial.model.label_smoothing <= high
    for name in HYPER_L2_GROUPS:
      assert HYPER_L2_RANGE[0] <= getattr(trial.model, name) <= HYPER_L2_RANGE[1]
    # Everything else is the base config's.
    assert (trial.model.depth, trial.training.train_epochs, trial.model.l2) == (
        BASE.model.depth, BASE.training.train_epochs, BASE.model.l2)
  # Log-uniform: about half of the draws below the geometric middle of the range.
  middle = math.sqrt(HYPER_L2_RANGE[0] * HYPER_L2_RANGE[1])
  below = sum(t.model.input_conv_l2 < middle for t in trials)
  assert 70 < below < 130


def test_per_example_coefficients_become_l2s_divided_by_the_train_size():
  trial = hyper_trials(BASE, 2)[1]
  resolved = trial.for_train_examples(1000)
  assert not resolved.model.l2_per_train_example
  for name in HYPER_L2_GROUPS:
    assert getattr(resolved.model, name) == pytest.approx(getattr(trial.model, name) / 1000)
    assert 1e-2 / 1000 <= getattr(resolved.model, name) <= 1e2 / 1000
  assert resolved.model.bn_l2 == 3e-4 and resolved.training.seed == trial.training.seed
  assert BASE.for_train_examples(1000) is BASE  # Absolute L2s are left alone.


def test_per_example_l2_needs_every_coefficient():
  with pytest.raises(ValueError, match=r"Invalid config value l2_per_train_example=True: .*"
                                       r"dense_bias_l2"):
    plain_trainer(l2_per_train_example=True, input_conv_l2=1.0, group_1_conv_l2=1.0,
                  group_2_conv_l2=1.0, group_3_conv_l2=1.0, dense_kernel_l2=1.0)
