"""Presets: each builds a valid config; --config picks one and flags override it."""
import pytest

import configs
from configs.shared import PIPELINE_MODEL
from local_runner import runner as local_runner
from pipeline.config import PipelineConfig, from_flags, from_preset


@pytest.mark.parametrize("name", configs.PRESETS)
def test_every_preset_is_plain_data_that_makes_a_valid_config(name):
  fields = configs.get_config(name)
  assert all(isinstance(value, (str, int, float, bool)) or (
      isinstance(value, tuple) and all(isinstance(item, int) for item in value))
             for value in fields.values())
  config = from_preset(name)
  assert config == from_flags([f"--config={name}"]) == PipelineConfig().replace(**fields)
  assert config.trainer.augmentation.augmix  # The pipeline's AugMix is on in every preset.
  # An ensemble's members are chosen under the validation shift in every preset.
  assert config.ensemble.ensemble_objective == "shift_nll"
  # So are spectrally normalised convolutions.
  assert config.trainer.model.spectral_norm_bound == PIPELINE_MODEL["spectral_norm_bound"] > 0
  # And SNGP's output layer over them, at the width its kernel scale was chosen for (the
  # digits' WRN-16-2); the WRN-28-10 presets keep the dense head.
  assert PIPELINE_MODEL["output_layer"] == "sngp"
  expected = "dense" if config.trainer.model.depth == 28 else "sngp"
  assert config.trainer.model.output_layer == expected
  # Each image centred on its own mean, chosen on the digits: the WRN-28-10 presets keep
  # UB's inputs.
  assert PIPELINE_MODEL["per_image_normalization"] == "centering"
  expected = "none" if config.trainer.model.depth == 28 else "centering"
  assert config.trainer.model.per_image_normalization == expected


def test_without_config_the_local_digits_preset_is_used():
  config = from_flags([])
  assert config == from_preset("local_digits")
  assert (config.data.dataset, config.trainer.model.depth,
          config.trainer.model.width_multiplier) == ("digits", 16, 2)


def test_flags_override_the_chosen_preset_whatever_their_order():
  config = from_flags(["--train_epochs=3", "--config=wrn28_10_cifar10", "--depth=16"])
  assert config.data.dataset == "cifar10"
  assert (config.trainer.model.depth, config.trainer.model.width_multiplier) == (16, 10)
  assert config.trainer.training.train_epochs == 3


def test_the_flagship_and_cluster_presets_keep_the_original_recipe_on_cifar10():
  for name in ("wrn28_10_cifar10", "kubeflow"):
    config = from_preset(name)
    assert (config.trainer.model.depth, config.trainer.model.width_multiplier,
            config.trainer.training.train_epochs) == (28, 10, 200)
    assert config.data.dataset == "cifar10"  # WRN-28-10 for 200 epochs is not for 1,797 digits.
  assert from_preset("kubeflow").runner.pipeline_name == "wrn-image-classifier"


def test_presets_build_on_the_default_and_tiny_is_the_tests_size():
  default = configs.get_config(configs.DEFAULT_PRESET)
  for name in configs.PRESETS:
    fields = configs.get_config(name)
    assert set(default) <= set(fields)  # Every preset starts from the default...
  tiny = from_preset("tiny")
  assert (tiny.data.dataset, tiny.trainer.model.depth,
          tiny.trainer.model.width_multiplier) == ("digits", 10, 1)
  assert tiny.trainer.augmentation.augmix == from_preset().trainer.augmentation.augmix


@pytest.mark.parametrize("argv, message", [
    (["--config=nope"], "config='nope': must be one of"),
    (["--config=kubeflow", "--config=local_digits"], "is given more than once"),
])
def test_a_bad_config_flag_is_refused_by_name(argv, message, capsys):
  with pytest.raises(ValueError, match=message):
    from_flags(argv)
  assert local_runner.main(argv) == 2
  assert message in capsys.readouterr().err
