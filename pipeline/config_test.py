"""The run's config: defaults, flag overrides, and errors that name the bad value."""
import os
import subprocess
import sys

import pytest

from pipeline.config import PipelineConfig, from_flags
from trainer_module.config import TrainerConfig


def test_defaults_are_a_small_local_wrn_on_the_embedded_digits():
  config = PipelineConfig()
  assert config.dataset == "digits"
  assert (config.trainer.depth, config.trainer.width_multiplier) == (16, 2)
  assert os.path.isabs(config.output_dir)


def test_the_standalone_trainer_defaults_are_the_original_recipe():
  trainer = TrainerConfig()
  assert (trainer.depth, trainer.width_multiplier, trainer.train_epochs) == (28, 10, 200)
  assert trainer.l2 == 2e-4 and trainer.base_learning_rate == 0.1
  assert trainer.lr_decay_epochs == (60, 120, 160) and trainer.lr_decay_ratio == 0.2


def test_flags_override_pipeline_and_trainer_fields_by_name():
  config = from_flags(["--dataset=cifar10", "--depth", "28", "--width_multiplier=10",
                       "--lr_decay_epochs=30,60", "--bn_l2=none", "--enable_cache=false"])
  assert config.dataset == "cifar10"
  assert (config.trainer.depth, config.trainer.width_multiplier) == (28, 10)
  assert config.trainer.lr_decay_epochs == (30, 60)
  assert config.trainer.bn_l2 is None and config.enable_cache is False
  assert config.trainer.train_epochs == PipelineConfig().trainer.train_epochs


def test_trainer_config_survives_the_trip_through_tfx_custom_config():
  trainer = TrainerConfig(depth=10, lr_decay_epochs=(1, 2))
  as_json_types = {k: list(v) if isinstance(v, tuple) else v for k, v in trainer.to_dict().items()}
  assert TrainerConfig.from_dict(as_json_types) == trainer


@pytest.mark.parametrize("flags, named", [
    (["--dataset=mnist"], "dataset='mnist'"),
    (["--train_steps=-5"], "train_steps=-5"),
    (["--train_epochs=0"], "train_epochs=0"),
    (["--dataset=tfrecord"], "tfrecord_dir=None"),
    (["--dataset=tfrecord", "--tfrecord_dir=/no/such/dir"], "tfrecord_dir='/no/such/dir'"),
    (["--label_smoothing=1.5"], "label_smoothing=1.5"),
    (["--num_classes=5"], "num_classes=5"),
    (["--depth=abc"], "--depth"),
    (["--no_such_flag=1"], "--no_such_flag"),
    (["--eval_fraction=0.6", "--test_fraction=0.5"], "test_fraction=0.5"),
    (["--augmix_width=0"], "augmix_width=0"),
    (["--augmix_depth=0"], "augmix_depth=0"),
    (["--augmix_depth=4"], "augmix_depth=4"),
    (["--augmix_prob_coeff=0"], "augmix_prob_coeff=0.0"),
    (["--aug_count=-1"], "aug_count=-1"),
    (["--max_eval_ece=-0.1"], "max_eval_ece=-0.1"),
    (["--max_nll_increase=-1"], "max_nll_increase=-1.0"),
    (["--min_corrupted_accuracy=1.5"], "min_corrupted_accuracy=1.5"),
    (["--corruptions=gaussian_noise,snow"], "corruptions='gaussian_noise,snow'"),
    (["--corruptions=contrast,contrast"], "lists a name twice"),
    (["--examples_per_corruption=-1"], "examples_per_corruption=-1"),
    (["--ensemble_size=0"], "ensemble_size=0"),
    (["--ensemble_size=4", "--hyper_trials=3"], "hyper_trials=3: must be >= ensemble_size (4)"),
    (["--ensemble_objective=brier"], "ensemble_objective='brier'"),
])
def test_bad_values_are_rejected_naming_the_flag(flags, named):
  with pytest.raises(ValueError) as error:
    from_flags(flags)
  assert named in str(error.value)


def test_tfrecord_dir_needs_train_and_eval_subdirectories(tmp_path):
  (tmp_path / "train").mkdir()
  (tmp_path / "train" / "data.tfrecord").write_bytes(b"")
  with pytest.raises(ValueError, match="eval"):
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}"])


def test_cifar10_takes_every_cifar10_c_corruption_and_no_corruptions_means_no_robustness_set():
  assert from_flags(["--dataset=cifar10", "--corruptions=snow,frost"]).corruptions == (
      "snow", "frost")
  assert from_flags(["--corruptions="]).corruptions == ()


def test_generated_corruptions_of_tfrecord_input_need_a_test_directory(tmp_path):
  for split in ("train", "eval"):
    (tmp_path / split).mkdir()
    (tmp_path / split / "data.tfrecord").write_bytes(b"")
  with pytest.raises(ValueError, match="has no test/ directory"):
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}"])
  assert from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}",
                     "--corruptions="]).corruptions == ()


def test_a_config_error_stops_the_runner_before_any_component_runs(tmp_path):
  output_dir = tmp_path / "outputs"
  result = subprocess.run(
      [sys.executable, "-m", "pipeline", "--dataset=nope", f"--output_dir={output_dir}"],
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 2
  assert "dataset='nope'" in result.stderr
  assert not output_dir.exists(), "nothing may be written for an invalid config"


def test_help_lists_every_flag_with_its_default():
  result = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0
  assert "--dataset" in result.stdout and "'digits'" in result.stdout
  assert "--width_multiplier" in result.stdout and "--tfrecord_dir" in result.stdout


def test_augmix_flags_keep_the_original_names_and_defaults():
  trainer = from_flags(["--augmix=true"]).trainer
  assert (trainer.augmix, trainer.aug_count, trainer.augmix_prob_coeff, trainer.augmix_depth,
          trainer.augmix_width) == (True, 1, 0.5, -1, 3)
  assert trainer.num_views == 1 and TrainerConfig().num_views == 0


def test_transform_options_ignore_training_only_fields():
  """Changing the learning rate must not invalidate Transform's cached output."""
  base = from_flags(["--augmix=true"]).trainer
  assert base.transform_options() == from_flags(["--augmix=true", "--base_learning_rate=0.3",
                                                 "--depth=28"]).trainer.transform_options()
  online = from_flags(["--augmix=true", "--augmix_online=true"]).trainer.transform_options()
  assert online["num_views"] == 0 and online["emit_augmix_inputs"]


def test_one_trial_is_the_single_model_and_more_trials_are_the_sweep():
  assert PipelineConfig().trials == (PipelineConfig().trainer,)
  config = from_flags(["--ensemble_size=2", "--hyper_trials=3", "--seed=5"])
  assert len(config.trials) == 3 and config.trials[0] == config.trainer
  assert config.trials[1].l2_per_train_example and config.trials[1].seed != 5
