"""Presets: each builds a valid config from the dataclasses' defaults, states only what it
changes, and --config picks one (its defaults in --help too); flags override it."""
import pytest

import configs
from configs import groups
from local_runner import runner as local_runner
from pipeline.config import PipelineConfig, from_flags, from_preset
from trainer_module.config import TrainerConfig


@pytest.mark.parametrize("name", configs.PRESETS)
def test_every_preset_is_plain_data_that_makes_a_valid_config(name):
  fields = configs.get_config(name)
  assert all(isinstance(value, (str, int, float, bool)) or (
      isinstance(value, tuple) and all(isinstance(item, int) for item in value))
             for value in fields.values())
  config = from_preset(name)
  assert config == from_flags([f"--config={name}"]) == PipelineConfig().replace(**fields)
  # The robustness settings are the defaults' in every preset: AugMix, spectral normalisation,
  # the map by distance and detail, members chosen under the validation shift.
  defaults = TrainerConfig()
  assert config.trainer.augmentation == defaults.augmentation
  assert (config.trainer.calibration.temperature_fit
          == defaults.calibration.temperature_fit == "distance_detail_curve")
  assert config.trainer.model.spectral_norm_bound == defaults.model.spectral_norm_bound > 0
  assert config.ensemble.ensemble_objective == "shift_nll"
  # SNGP's layer and centring were chosen at the digits' width: the WRN-28-10 presets keep UB's
  # dense head and inputs.
  wide = config.trainer.model.depth == 28
  assert config.trainer.model.output_layer == ("dense" if wide else "sngp")
  assert config.trainer.model.per_image_normalization == ("none" if wide else "centering")


@pytest.mark.parametrize("name", configs.PRESETS)
def test_a_preset_states_only_what_differs_from_the_defaults(name):
  defaults = groups.flatten(PipelineConfig())
  same = {field: value for field, value in configs.get_config(name).items()
          if value == defaults[field]}
  assert not same, f"{name} restates the defaults' {same}"


def test_help_shows_the_values_the_chosen_preset_uses(capsys):
  assert local_runner.main(["--config=wrn28_10_cifar10", "--help"]) == 0
  flagship = capsys.readouterr().out
  assert "--output_layer  (default: 'dense')" in flagship
  assert "--dataset  (default: 'cifar10')" in flagship
  assert local_runner.main(["--help"]) == 0
  digits = capsys.readouterr().out
  assert "--output_layer  (default: 'sngp')" in digits and "--depth  (default: 16)" in digits
  assert "--config  (default: 'local_digits')" in digits
  assert local_runner.main(["--help", "--config=nope"]) == 2
  assert "config='nope': must be one of" in capsys.readouterr().err


def test_kubeflows_help_shows_the_cluster_preset_or_the_one_chosen(capsys):
  from kubeflow import cli
  assert cli.main(["--help"]) == 0
  assert "--output_layer  (default: 'dense')" in capsys.readouterr().out
  assert cli.main(["compile", "--config=local_digits", "--help"]) == 0
  assert "--output_layer  (default: 'sngp')" in capsys.readouterr().out


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


def test_tiny_builds_on_the_default_preset_and_kubeflow_on_the_flagship():
  for base, name in (("local_digits", "tiny"), ("wrn28_10_cifar10", "kubeflow")):
    assert set(configs.get_config(base)) <= set(configs.get_config(name))
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
