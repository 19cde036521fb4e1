"""The run's config: defaults, flag overrides, and errors that name the bad value."""
import contextlib
import gzip
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from trainer_module import reference_corruptions
from local_runner import runner as local_runner
from pipeline.config import (LOCAL_BEAM_REQUIREMENTS, PipelineConfig, check_runs_here,
                             from_flags, from_preset)
from test_support.tfrecord_inputs import write_digits_tfrecord_dir
from trainer_module.config import ModelConfig, TrainerConfig

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_defaults_are_a_small_local_wrn_on_the_embedded_digits():
  config = from_preset()
  assert config.data.dataset == "digits"
  assert (config.trainer.model.depth, config.trainer.model.width_multiplier) == (16, 2)
  assert os.path.isabs(config.runner.output_dir)


def test_the_trainer_defaults_are_the_original_recipe_with_the_robustness_settings():
  trainer = TrainerConfig()
  model, training = trainer.model, trainer.training
  assert (model.depth, model.width_multiplier, training.train_epochs) == (28, 10, 200)
  assert model.l2 == 2e-4 and training.base_learning_rate == 0.1
  assert training.lr_decay_epochs == (60, 120, 160) and training.lr_decay_ratio == 0.2
  assert (model.spectral_norm_bound, model.output_layer, model.per_image_normalization) == (
      0.25, "sngp", "centering")
  assert trainer.calibration.temperature_fit == "distance_detail_curve"
  # The pipeline's and the ensemble command's selection objective: one default.
  from trainer_module.__main__ import EnsembleFlags
  assert PipelineConfig().ensemble.ensemble_objective == "shift_nll"
  assert EnsembleFlags(members=("m",), eval_files=("e",), transform_output="t",
                       output_dir="o").ensemble_objective == "shift_nll"


def test_flags_override_pipeline_and_trainer_fields_by_name():
  config = from_flags(["--dataset=cifar10", "--depth", "28", "--width_multiplier=10",
                       "--lr_decay_epochs=30,60", "--bn_l2=none", "--enable_cache=false"])
  assert config.data.dataset == "cifar10"
  assert (config.trainer.model.depth, config.trainer.model.width_multiplier) == (28, 10)
  assert config.trainer.training.lr_decay_epochs == (30, 60)
  assert config.trainer.model.bn_l2 is None and config.runner.enable_cache is False
  assert config.trainer.training.train_epochs == from_preset().trainer.training.train_epochs


def test_a_flag_may_name_its_field_by_its_dotted_path_and_each_group_checks_its_own():
  dotted = from_flags(["--data.dataset=cifar10", "--trainer.model.depth=28"])
  assert dotted == from_flags(["--dataset=cifar10", "--depth=28"])
  with pytest.raises(ValueError, match="Unknown flag --model.depth"):
    from_flags(["--model.depth=28"])  # A path starts at the run's config.
  with pytest.raises(ValueError, match="depth=12: must be 6n"):
    ModelConfig(depth=12)
  with pytest.raises(AttributeError):
    from_flags([]).trainer.depth  # pylint: disable=expression-not-assigned


def test_a_replace_rebuilds_only_the_groups_it_touches():
  config = from_flags([])
  changed = config.replace(train_epochs=3, dataset="cifar10")
  assert changed.trainer.training.train_epochs == 3 and changed.data.dataset == "cifar10"
  assert changed.gate is config.gate and changed.trainer.model is config.trainer.model


def test_trainer_config_survives_the_trip_through_tfx_custom_config():
  trainer = TrainerConfig().replace(depth=10, lr_decay_epochs=(1, 2))
  as_json_types = {k: list(v) if isinstance(v, tuple) else v for k, v in trainer.to_dict().items()}
  assert TrainerConfig.from_dict(as_json_types) == trainer


def test_a_recorded_config_with_a_field_this_version_lacks_is_refused_by_name():
  with pytest.raises(ValueError, match=r"Unknown trainer config field\(s\): "
                                       r"\['per_image_standardization'\]"):
    TrainerConfig.from_dict({**TrainerConfig().to_dict(), "per_image_standardization": True})


@pytest.mark.parametrize("flags, message", [
    (["--dataset=mnist"],
     "dataset='mnist': must be one of ('digits', 'cifar10', 'tfrecord', 'image_dir')"),
    (["--train_steps=-5"], "train_steps=-5: must be > 0 (or unset to train for train_epochs)"),
    (["--train_epochs=0"], "train_epochs=0: must be > 0"),
    (["--dataset=tfrecord"], "tfrecord_dir=None: is required with dataset=tfrecord"),
    (["--dataset=tfrecord", "--tfrecord_dir=/no/such/dir"],
     "tfrecord_dir='/no/such/dir': is not a directory"),
    (["--dataset=image_dir"], "image_dir=None: is required with dataset=image_dir"),
    (["--dataset=image_dir", "--image_dir=/no/such/dir"],
     "image_dir='/no/such/dir': is not a directory"),
    (["--image_dir=/tmp"], "image_dir='/tmp': is only used with dataset=image_dir"),
    (["--skip_bad_images=true"], "skip_bad_images=True: is only used with dataset=image_dir"),
    (["--class_names=cat,dog"], "class_names='cat,dog': is only used with dataset=tfrecord"),
    (["--label_smoothing=1.5"], "label_smoothing=1.5: must be in [0, 1]"),
    (["--num_classes=5"], "num_classes=5: disagrees with the label domain [0, 9] of "),
    (["--depth=abc"], "--depth: 'abc' is not a valid int"),
    (["--no_such_flag=1"], "Unknown flag --no_such_flag. Known flags: --aug_count,"),
    (["--eval_fraction=0.6", "--test_fraction=0.5"],
     "test_fraction=0.5: must be in [0, 1 - eval_fraction)"),
    (["--augmix_width=0"], "augmix_width=0: must be >= 1"),
    (["--augmix_depth=0"], "augmix_depth=0: must be in [1, 3], or -1 to sample it"),
    (["--augmix_depth=4"], "augmix_depth=4: must be in [1, 3], or -1 to sample it"),
    (["--augmix_prob_coeff=0"], "augmix_prob_coeff=0.0: must be > 0"),
    (["--aug_count=-1"], "aug_count=-1: must be >= 0"),
    (["--augmix_view_sets=0"], "augmix_view_sets=0: must be >= 1"),
    (["--max_eval_ece=-0.1"], "max_eval_ece=-0.1: must be >= 0"),
    (["--max_nll_increase=-1"], "max_nll_increase=-1.0: must be >= 0"),
    (["--min_corrupted_accuracy=1.5"], "min_corrupted_accuracy=1.5: must be in [0, 1]"),
    (["--corruptions=gaussian_noise,sparkles"],
     "corruptions='gaussian_noise,sparkles': ['sparkles'] unknown; known: gaussian_noise,"),
    (["--corruptions=contrast,contrast"], "corruptions='contrast,contrast': lists a name twice"),
    (["--examples_per_corruption=-1"],
     "examples_per_corruption=-1: must be >= 0 (0 = every test image)"),
    (["--corruption_workers=-1"],
     "corruption_workers=-1: must be >= 0 (0 = one per core when that pays)"),
    (["--beam_running_mode=fast"],
     "beam_running_mode='fast': must be one of ('auto', 'multi_processing',"),
    (["--beam_in_memory_max_examples=-1"], "beam_in_memory_max_examples=-1: must be >= 0"),
    (["--temperature_fit=corrupted"],
     "temperature_fit='corrupted': must be one of ('distance_detail_curve', "
     "'validation_corruptions', 'clean')"),
    (["--per_image_normalization=standardization"],
     "per_image_normalization='standardization': must be one of ('none', 'centering')"),
    (["--validation_corruption_examples=0"], "validation_corruption_examples=0: must be >= 1"),
    (["--ensemble_size=0"], "ensemble_size=0: must be >= 1"),
    (["--ensemble_size=4", "--hyper_trials=3"], "hyper_trials=3: must be >= ensemble_size (4)"),
    (["--ensemble_objective=brier"],
     "ensemble_objective='brier': must be one of ('nll', 'acc', 'nll-acc', 'shift_nll')"),
])
def test_bad_values_are_rejected_naming_the_flag_its_value_and_the_rule_it_breaks(flags, message):
  with pytest.raises(ValueError) as error:
    from_flags(flags)
  assert message in str(error.value)


def test_an_image_folder_sets_the_classes_whatever_num_classes_and_the_schema_say(tmp_path):
  config = from_flags(["--dataset=image_dir", f"--image_dir={tmp_path}", "--num_classes=3"])
  assert config.data.image_dir == str(tmp_path) and config.declared_class_names == ()
  assert from_flags([]).declared_class_names == tuple("0123456789")  # The digits.


def test_tfrecord_classes_are_named_by_index_or_by_class_names(tmp_path):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=3)
  flags = ["--dataset=tfrecord", f"--tfrecord_dir={data_dir}", "--corruptions="]
  assert from_flags(flags).declared_class_names == tuple("0123456789")
  names = "zero,one,two,three,four,five,six,seven,eight,nine"
  assert from_flags(flags + [f"--class_names={names}"]).declared_class_names == tuple(
      names.split(","))
  with pytest.raises(ValueError, match="class_names='a,b': must name num_classes=10 classes"):
    from_flags(flags + ["--class_names=a,b"])


def test_tfrecord_dir_needs_train_and_eval_subdirectories(tmp_path):
  (tmp_path / "train").mkdir()
  (tmp_path / "train" / "data.tfrecord").write_bytes(b"")
  with pytest.raises(ValueError, match=r"has no \S+/eval \(expected train/, eval/ and optionally "
                                       r"test/ subdirectories\)"):
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}"])


def test_cifar10_takes_every_cifar10_c_corruption_and_no_corruptions_means_no_robustness_set():
  assert from_flags(["--dataset=cifar10", "--corruptions=snow,frost"]).evaluation.corruptions == (
      "snow", "frost")
  assert from_flags(["--corruptions="]).evaluation.corruptions == ()


def test_the_default_robustness_set_is_the_15_benchmark_corruptions_in_four_families():
  names = from_preset().evaluation.corruptions
  assert len(names) == 15
  assert {reference_corruptions.FAMILY_OF[name] for name in names} == {
      "noise", "blur", "weather", "digital"}


def test_the_validation_corruptions_that_choose_the_temperature_are_never_evaluated():
  assert from_preset().trainer.calibration.temperature_fit == "distance_detail_curve"
  with pytest.raises(ValueError, match=r"Invalid config value corruptions='contrast,spatter': "
                                       r"\['spatter'\] choose the temperature"):
    from_flags(["--corruptions=contrast,spatter"])
  config = from_flags(["--corruptions=contrast,spatter", "--temperature_fit=clean"])
  assert config.evaluation.corruptions == ("contrast", "spatter")
  with pytest.raises(ValueError, match=r"\['spatter'\] choose the temperature "
                                       r"\(temperature_fit=validation_corruptions\)"):
    from_flags(["--corruptions=contrast,spatter", "--temperature_fit=validation_corruptions"])
  with pytest.raises(ValueError, match=r"\(temperature_fit=distance_detail_curve\)"):
    from_flags(["--corruptions=contrast,spatter"])
  # The project's own validation corruption is in no robustness set, whatever the fit.
  with pytest.raises(ValueError, match=r"\['uneven_illumination'\] unknown"):
    from_flags(["--corruptions=contrast,uneven_illumination", "--temperature_fit=clean"])


def test_corruptions_that_cannot_run_here_are_refused_naming_what_is_missing(monkeypatch):
  monkeypatch.setattr(reference_corruptions, "magick_wand", lambda: None)
  with pytest.raises(ValueError, match=r"corruptions='contrast,snow'.*snow cannot run on this "
                                       r"machine: it needs ImageMagick"):
    check_runs_here(from_flags(["--corruptions=contrast,snow"]))
  check_runs_here(from_flags(["--corruptions=contrast"]))
  check_runs_here(from_flags(["--dataset=cifar10"]))  # CIFAR-10-C is read, not made.


def _empty_file(split_dir):
  (split_dir / "part-0.tfrecord").write_bytes(b"")


def _empty_gzip(split_dir):
  with gzip.open(split_dir / "part-0.tfrecord.gz", "wb"):
    pass


def _only_a_subdirectory(split_dir):
  (split_dir / "nested").mkdir()


def _not_gzip(split_dir):
  (split_dir / "part-0.tfrecord.gz").write_bytes(b"plain bytes, not gzip")


@pytest.mark.parametrize("split", ["train", "eval", "test"])
@pytest.mark.parametrize("spoil, problem", [
    (_empty_file, "every file in {split_dir} is empty: the split has no records"),
    (_empty_gzip, "every file in {split_dir} is empty: the split has no records"),
    (_only_a_subdirectory, "{split_dir} holds no TFRecord files"),
    (_not_gzip, "{split_dir}/part-0.tfrecord.gz cannot be read: "),
], ids=["empty-file", "empty-gzip", "no-file", "not-gzip"])
def test_a_split_without_a_readable_record_is_refused_naming_it_and_its_directory(
    tmp_path, split, spoil, problem):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=3)
  split_dir = tmp_path / "data" / split
  for path in split_dir.iterdir():
    path.unlink()
  spoil(split_dir)
  with pytest.raises(ValueError) as error:
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={data_dir}"])
  assert f"split '{split}': {problem.format(split_dir=split_dir)}" in str(error.value)


PATH_FLAG_CASES = [
    ("--warm_start={tmp}/nonexistent", "warm_start={tmp}/nonexistent: no such checkpoint or "
     "SavedModel"),
    ("--warm_start={tmp}", "warm_start={tmp}: the directory holds neither a SavedModel"),
    ("--tfds_data_dir={tmp}/nonexistent", "tfds_data_dir='{tmp}/nonexistent': is not a "
     "directory"),
    ("--tfrecord_dir={tmp}/data", "split 'eval': every file in {tmp}/data/eval is empty"),
]


def _runner_flags_with_an_empty_eval_split(tmp_path, flag):
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=3)
  with open(os.path.join(data_dir, "eval", "digits.tfrecord"), "wb"):
    pass  # Zero records.
  flags = [f"--output_dir={tmp_path / 'out'}", flag.format(tmp=tmp_path)]
  return flags + (["--dataset=tfrecord"] if "tfrecord_dir" in flag else [])


@pytest.mark.parametrize("flag, message", PATH_FLAG_CASES,
                         ids=["warm-start-missing", "warm-start-empty-dir", "tfds-data-dir",
                              "empty-eval-split"])
def test_a_path_a_flag_names_is_checked_before_any_step_runs(tmp_path, capsys, flag, message):
  from local_runner import runner
  assert runner.main(_runner_flags_with_an_empty_eval_split(tmp_path, flag)) == 2
  stderr = capsys.readouterr().err
  assert stderr.startswith("error: Invalid config value")
  assert message.format(tmp=tmp_path) in stderr, stderr
  assert len(stderr.splitlines()) == 1
  assert not (tmp_path / "out").exists(), "nothing may be written"


def test_python_m_local_runner_refuses_a_bad_path_with_status_2_and_one_line(tmp_path):
  """The same check through the command users type (the module's entry point and its exit).
  Each case's message is checked in-process above; the child runs the one whose check loads
  neither TensorFlow nor TFX, so it starts and exits in a fraction of a second."""
  [(flag, message)] = [case for case in PATH_FLAG_CASES if case[0].startswith("--tfds_data_dir")]
  result = subprocess.run(
      [sys.executable, "-m", "local_runner", *_runner_flags_with_an_empty_eval_split(tmp_path,
                                                                                  flag)],
      capture_output=True, text=True, timeout=300, cwd=tmp_path,
      env={**os.environ, "PYTHONPATH": _REPO})
  assert result.returncode == 2, result.stderr[-2000:]
  assert result.stderr.startswith("error: Invalid config value")
  assert message.format(tmp=tmp_path) in result.stderr, result.stderr
  assert len(result.stderr.splitlines()) == 1
  assert not (tmp_path / "out").exists(), "nothing may be written"


def test_generated_corruptions_of_tfrecord_input_need_a_test_directory(tmp_path):
  for split in ("train", "eval"):
    (tmp_path / split).mkdir()
    (tmp_path / split / "data.tfrecord").write_bytes(b"records")
  with pytest.raises(ValueError, match="has no test/ directory"):
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}"])
  assert from_flags(["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}",
                     "--corruptions="]).evaluation.corruptions == ()


def test_a_config_error_stops_the_runner_before_any_component_runs(tmp_path):
  output_dir = tmp_path / "outputs"
  result = subprocess.run(
      [sys.executable, "-m", "local_runner", "--dataset=nope", f"--output_dir={output_dir}"],
      capture_output=True, text=True, timeout=300)
  assert result.returncode == 2
  assert "dataset='nope'" in result.stderr
  assert not output_dir.exists(), "nothing may be written for an invalid config"


def test_help_lists_every_flag_with_its_default():
  result = subprocess.run([sys.executable, "-m", "local_runner", "--help"], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0
  assert "--dataset" in result.stdout and "'digits'" in result.stdout
  assert "--width_multiplier" in result.stdout and "--tfrecord_dir" in result.stdout


def test_augmix_flags_keep_the_original_names_and_default_to_two_views_with_the_jsd_loss():
  trainer = TrainerConfig()
  augmix = trainer.augmentation
  assert (augmix.augmix, augmix.aug_count, augmix.augmix_prob_coeff, augmix.augmix_depth,
          augmix.augmix_width, augmix.augmix_view_sets) == (True, 2, 0.5, -1, 3, 4)
  assert trainer.augmentation.num_views == 2
  assert from_flags(["--augmix=false"]).trainer.augmentation.num_views == 0


def test_augmix_is_on_in_the_local_and_kubeflow_presets():
  cluster = from_preset("kubeflow")
  for trainer in (from_flags([]).trainer, cluster.trainer):
    assert trainer.augmentation == TrainerConfig().augmentation  # The defaults'.
  assert cluster.trainer.model.depth == 28  # The cluster keeps the original recipe otherwise.


def test_transform_options_ignore_training_only_fields():
  """Changing the learning rate must not invalidate Transform's cached output."""
  base = from_flags([]).trainer
  assert base.transform_options() == from_flags(["--base_learning_rate=0.3",
                                                 "--depth=28"]).trainer.transform_options()
  online = from_flags(["--augmix_online=true"]).trainer.transform_options()
  assert online["num_views"] == 0 and online["emit_augmix_inputs"]
  assert online == from_flags(["--augmix_online=true",
                               "--augmix_view_sets=9"]).trainer.transform_options()
  assert base.transform_options()["view_sets"] == TrainerConfig().augmentation.augmix_view_sets


@pytest.mark.parametrize("name", ["x" * 300, "../../x", ".", "..", "a/b", "", " "],
                         ids=["300-chars", "parent-path", "dot", "dot-dot", "separator", "empty",
                              "blank"])
def test_pipeline_names_that_are_not_one_safe_directory_name_are_rejected(name):
  with pytest.raises(ValueError, match=r"Invalid config value pipeline_name=.*must be 1-100 "
                                       r"letters"):
    from_flags([f"--pipeline_name={name}"])


def test_a_pipeline_name_may_use_dots_dashes_and_underscores_inside():
  assert from_flags(["--pipeline_name=wrn-28.10_cifar"]).runner.pipeline_name == "wrn-28.10_cifar"


def test_an_empty_output_dir_is_rejected_instead_of_meaning_the_current_directory():
  with pytest.raises(ValueError, match=r"Invalid config value output_dir='': must not be empty"):
    from_flags(["--output_dir="])


def test_an_output_dir_that_is_a_file_or_under_a_file_is_rejected(tmp_path):
  a_file = tmp_path / "file"
  a_file.write_text("")
  with pytest.raises(ValueError, match=r"output_dir=.*: is a file, not a directory"):
    from_flags([f"--output_dir={a_file}"]).check_output_dir()
  with pytest.raises(ValueError, match=rf"output_dir=.*: cannot be created: {a_file} is a file"):
    from_flags([f"--output_dir={a_file / 'out'}"]).check_output_dir()
  from_flags([f"--output_dir={tmp_path / 'new' / 'out'}"]).check_output_dir()


@pytest.mark.parametrize("bad_flags, message", [
    (lambda tmp: [f"--output_dir={tmp / 'file'}"], "is a file, not a directory"),
    (lambda tmp: ["--output_dir="], "output_dir='': must not be empty"),
    (lambda tmp: [f"--output_dir={tmp / 'out'}", "--pipeline_name=../../escaped"],
     "pipeline_name='../../escaped': must be 1-100 letters, digits, '_', '-' or '.', starting "
     "with a letter or digit"),
    (lambda tmp: [f"--output_dir={tmp / 'out'}", f"--pipeline_name={'p' * 300}"],
     f"pipeline_name='{'p' * 300}': must be 1-100 letters, digits, '_', '-' or '.'"),
], ids=["file", "empty", "escaping-name", "long-name"])
def test_the_runner_exits_2_on_a_bad_output_location_before_writing_anything(tmp_path, bad_flags,
                                                                             message):
  (tmp_path / "file").write_text("")
  # Run from tmp_path: an empty output_dir that became the current directory would show there.
  result = subprocess.run([sys.executable, "-m", "local_runner", *bad_flags(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": _REPO})
  assert result.returncode == 2, result.stderr[-2000:]
  assert "error: Invalid config value" in result.stderr and message in result.stderr
  assert [p.name for p in tmp_path.iterdir()] == ["file"], "nothing may be written"


def test_a_read_only_output_dir_exits_2_for_a_user_who_may_not_write_there():
  """root writes anywhere, so the runner runs as `nobody` in a forked child when tests run as
  root; the child reports its exit code and stderr through a pipe. (pytest's tmp_path is not
  reachable for `nobody`, hence a directory of its own.)"""
  parent = tempfile.mkdtemp()
  os.chmod(parent, 0o755)
  read_only = pathlib.Path(parent) / "read-only"
  read_only.mkdir(mode=0o555)
  read_fd, write_fd = os.pipe()
  pid = os.fork()
  if pid == 0:  # The child: drop privileges, run the runner's main, report, exit.
    try:
      os.close(read_fd)
      if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
      stderr = io.StringIO()
      with contextlib.redirect_stderr(stderr):
        code = local_runner.main([f"--output_dir={read_only / 'out'}"])
      os.write(write_fd, json.dumps([code, stderr.getvalue()]).encode())
    finally:
      os._exit(0)
  os.close(write_fd)
  with os.fdopen(read_fd) as pipe:
    code, stderr = json.loads(pipe.read())
  os.waitpid(pid, 0)
  written = list(read_only.iterdir())
  shutil.rmtree(parent)
  assert code == 2
  assert (f"Invalid config value output_dir='{read_only / 'out'}': is not writable: this user "
          f"may not create files in {read_only}") in stderr
  assert written == []


def test_one_trial_is_the_single_model_and_more_trials_are_the_sweep():
  assert from_preset().trials == (from_preset().trainer,)
  config = from_flags(["--ensemble_size=2", "--hyper_trials=3", "--seed=5",
                       "--temperature_fit=validation_corruptions"])
  assert len(config.trials) == 3 and config.trials[0] == config.trainer
  assert config.trials[1].model.l2_per_train_example and config.trials[1].training.seed != 5


def test_auto_beam_runs_small_steps_in_memory_and_big_or_uncounted_ones_on_every_core(tmp_path):
  config = from_preset().replace(output_dir=str(tmp_path), beam_in_memory_max_examples=2000)
  assert from_preset().beam.beam_in_memory_max_examples == 10000
  cores = os.cpu_count()
  installed = f"--requirements_file={LOCAL_BEAM_REQUIREMENTS}"  # TFX builds no sdist of itself.
  in_memory = ["--direct_running_mode=in_memory", "--direct_num_workers=1", installed]
  processes = ["--direct_running_mode=multi_processing", f"--direct_num_workers={cores}",
               installed]
  assert config.beam.beam_running_mode == "auto" and config.data.input_examples == 1797
  assert config.beam_pipeline_args(2000) == in_memory
  assert config.beam_pipeline_args(2001) == processes
  assert config.beam_pipeline_args() == processes  # Size unknown (tfrecord inputs).
  assert config.replace(beam_workers=3).beam_pipeline_args(10**6)[1] == "--direct_num_workers=3"
  fixed = config.replace(beam_running_mode="multi_processing")
  assert fixed.beam_pipeline_args(10) == processes
  # A step's own arguments: the engine under auto, nothing when the pipeline's say it all.
  assert config.beam_step_args(10) == in_memory[:2]
  assert config.beam_step_args(None) == processes[:2]
  assert fixed.beam_step_args(10) == []


def test_tfx_builds_no_sdist_of_itself_for_a_local_beam_step(tmp_path):
  """TFX packages its install tree for remote workers unless a dependency flag is given; the
  local DirectRunner stages nothing, so the step's arguments name what is installed here."""
  from tfx.utils import dependency_utils
  args = from_preset().replace(output_dir=str(tmp_path)).beam_pipeline_args(10)
  assert LOCAL_BEAM_REQUIREMENTS == os.path.join(_REPO, "requirements.lock")
  assert os.path.isfile(LOCAL_BEAM_REQUIREMENTS)
  assert dependency_utils.make_beam_dependency_flags(args) == args  # No --extra_package.


def test_the_evaluation_set_step_is_keyed_by_the_code_that_writes_its_examples(tmp_path):
  from components.evaluation_set import examples_code_fingerprint
  from pipeline.pipeline import create_pipeline
  config = from_preset().replace(output_dir=str(tmp_path))
  (step,) = [c for c in create_pipeline(config, local_runner.local_parts(config)).components
             if c.id == "EvaluationSetGen"]
  assert step.exec_properties["code_fingerprint"] == examples_code_fingerprint()


def test_each_beam_step_gets_the_engine_for_the_input_datas_size(tmp_path):
  """The pipeline-wide arguments come first and a step's own last: Beam's last flag wins."""
  from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
  from pipeline.pipeline import create_pipeline
  small = from_preset().replace(output_dir=str(tmp_path), beam_in_memory_max_examples=20000)
  for component in create_pipeline(small, local_runner.local_parts(small)).components:
    args = getattr(component.executor_spec, "beam_pipeline_args", None)
    if args is None:
      continue
    options = PipelineOptions(args).view_as(DirectOptions)
    assert (options.direct_running_mode, options.direct_num_workers) == ("in_memory", 1), \
        component.id
  config = from_preset().replace(output_dir=str(tmp_path))
  def modes(config):
    return {c.id: PipelineOptions(c.executor_spec.beam_pipeline_args).view_as(
        DirectOptions).direct_running_mode
            for c in create_pipeline(config, local_runner.local_parts(config)).components
            if hasattr(c.executor_spec, "beam_pipeline_args")}
  # The digits' 1,797 examples: Transform too, though it writes 8 AugMix views of each train
  # image, and the Evaluator, though it scores 22,456 (TensorFlow's work, on every core in one
  # process).
  assert modes(config) == {"ImageDatasetExampleGen": "in_memory", "StatisticsGen": "in_memory",
                           "ValidationGate": "in_memory", "Transform": "in_memory",
                           "Evaluator": "in_memory"}
  cifar = config.replace(dataset="cifar10")  # 60,000 examples, 10,000 in the test split.
  assert modes(cifar) == {"ImageDatasetExampleGen": "multi_processing",
                          "StatisticsGen": "multi_processing",
                          "ValidationGate": "multi_processing",
                          "Transform": "multi_processing", "Evaluator": "multi_processing"}


@pytest.mark.parametrize("flag, message", [
    ("--base_learning_rate=inf", "base_learning_rate=inf: must be a finite number"),
    ("--max_accuracy_drop=inf", "max_accuracy_drop=inf: must be a finite number"),
    ("--seed=-1", r"seed=-1: must be in \[0, 2\*\*63 - 1\]"),
], ids=["inf-learning-rate", "inf-gate-bound", "negative-seed"])
def test_values_that_fail_only_in_the_trainer_are_refused_up_front(flag, message):
  with pytest.raises(ValueError, match=message):
    from_flags([flag])


def test_block_on_drift_without_the_drift_check_is_refused():
  with pytest.raises(ValueError, match=r"Invalid config value block_on_drift=True: needs "
                                       r"drift_check=true"):
    from_flags(["--drift_check=false", "--block_on_drift=true"])
  assert not from_flags(["--drift_check=false"]).drift.drift_check
  assert from_flags([]).drift.drift_check  # The check runs unless turned off.


def _serving_dir(tmp_path):
  config = from_flags([f"--output_dir={tmp_path / 'out'}"])
  return config, pathlib.Path(config.runner.serving_model_dir)


def test_a_file_in_place_of_the_serving_directory_is_refused_before_any_step(tmp_path):
  config, serving = _serving_dir(tmp_path)
  serving.parent.mkdir(parents=True)
  serving.write_text("")
  with pytest.raises(ValueError, match=rf"output_dir=.*: its serving directory {serving} is a "
                     "file, not a directory"):
    config.check_output_dir()


def test_a_serving_directory_with_no_version_number_left_is_refused_before_any_step(tmp_path):
  config, serving = _serving_dir(tmp_path)
  (serving / "9223372036854775807").mkdir(parents=True)
  with pytest.raises(ValueError, match="its serving directory: it holds .*9223372036854775807, "
                     "version 9223372036854775807, the largest TF Serving can parse"):
    config.check_output_dir()


def test_a_serving_directory_this_user_may_not_write_is_refused_before_any_step(
    tmp_path, monkeypatch):
  config, serving = _serving_dir(tmp_path)
  serving.mkdir(parents=True)
  access = os.access
  monkeypatch.setattr(os, "access", lambda path, mode: str(path) != str(serving) and access(
      path, mode))  # Root may write anywhere: the permission bits alone cannot show it.
  with pytest.raises(ValueError, match=f"its serving directory is not writable: this user may "
                     f"not create files in {serving}"):
    config.check_output_dir()


@pytest.mark.skipif(not os.path.ismount("/sys"), reason="needs sysfs at /sys")
def test_an_output_dir_its_file_system_refuses_is_named_not_a_traceback():
  with pytest.raises(ValueError, match=r"output_dir='/sys/x': cannot be created: /sys refuses "
                     "new directories"):
    from_flags(["--output_dir=/sys/x"]).check_output_dir()


def _float_label(example):
  label = example.features.feature["label"].int64_list.value[0]
  example.features.feature["label"].float_list.value[:] = [float(label)]


def _int_key(example):
  example.features.feature["key"].int64_list.value[:] = [7]


def _no_key(example):
  del example.features.feature["key"]


def _extra_feature(example):
  example.features.feature["weight"].float_list.value[:] = [1.0]


@pytest.mark.parametrize("spoil, problem", [
    (_float_label, "feature 'label' holds float_list, expected int64_list"),
    (_int_key, "feature 'key' holds int64_list, expected bytes_list"),
    (_no_key, "feature 'key' is missing"),
    (_extra_feature, "feature 'weight' is not in the schema"),
], ids=["float-label", "int64-key", "missing-key", "extra-feature"])
def test_input_files_written_with_a_wrong_feature_are_refused_naming_file_and_feature(
    tmp_path, spoil, problem):
  import tensorflow as tf
  data_dir = write_digits_tfrecord_dir(str(tmp_path / "data"), per_split_limit=3)
  path = os.path.join(data_dir, "train", "digits.tfrecord")
  examples = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
  with tf.io.TFRecordWriter(path) as writer:
    for example in examples:
      spoil(example)
      writer.write(example.SerializeToString())
  with pytest.raises(ValueError) as error:
    from_flags(["--dataset=tfrecord", f"--tfrecord_dir={data_dir}"])
  assert f"tfrecord_dir='{data_dir}': split 'train': {path}, record 0" in str(error.value)
  assert problem in str(error.value)


@pytest.mark.parametrize("name", ["reports", "logs", "metadata", "pipeline_root"])
def test_a_file_where_the_run_writes_a_directory_is_refused_before_any_step(tmp_path, name):
  """The report copies, the log, MLMD and the pipeline root go under output_dir: a file in the
  way once let every step run, then lost the summary to a traceback."""
  (tmp_path / name).write_text("")
  with pytest.raises(ValueError, match=rf"output_dir=.*: its {name} directory {tmp_path / name}"
                                       " is a file, not a directory"):
    from_flags([f"--output_dir={tmp_path}"]).check_output_dir()


def test_an_s3_image_folder_that_cannot_be_reached_is_refused_before_any_step(monkeypatch):
  from test_support.s3_server import free_port
  endpoint = f"http://127.0.0.1:{free_port()}"  # Nothing listens there.
  for name, value in {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "key",
                      "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}.items():
    monkeypatch.setenv(name, value)
  config = from_flags(["--dataset=image_dir", "--image_dir=s3://photos/cats"])
  with pytest.raises(ValueError, match=rf"image_dir='s3://photos/cats': cannot be reached: the "
                                       rf"S3 endpoint {endpoint} does not answer"):
    check_runs_here(config)


def test_the_run_history_is_kept_under_the_output_dir_unless_a_folder_is_given(tmp_path):
  config = from_flags([f"--output_dir={tmp_path}", "--pipeline_name=nightly"])
  assert config.runner.history_directory == os.path.join(str(tmp_path), "history", "nightly")
  assert config.runner.history_runs == 10 and not config.data.force_retrain
  given = from_flags([f"--output_dir={tmp_path}", "--history_dir=s3://bucket/history",
                      "--history_runs=3", "--force_retrain=true"])
  assert given.runner.history_directory == "s3://bucket/history"
  assert (given.runner.history_runs, given.data.force_retrain) == (3, True)
  with pytest.raises(ValueError, match="history_runs=0.*must be at least 1"):
    from_flags(["--history_runs=0"])


def test_every_step_after_the_span_check_runs_only_when_it_decides_to_train(tmp_path):
  from pipeline.pipeline import create_pipeline
  from tfx.dsl.experimental.conditionals import conditional
  from components.span_check import SpanCheck
  config = from_preset().replace(output_dir=str(tmp_path), force_retrain=True)
  pipeline = create_pipeline(config, local_runner.local_parts(config))
  (check,) = [c for c in pipeline.components if isinstance(c, SpanCheck)]
  assert check.exec_properties["force_retrain"] == 1
  assert check.exec_properties["history_dir"] == config.runner.history_directory
  registry = pipeline.dsl_context_registry
  gated = {c.id for c in pipeline.components if conditional.get_predicates(c, registry)}
  assert gated == {c.id for c in pipeline.components} - {"ImageDatasetExampleGen", "SpanCheck"}


def test_a_span_pattern_reads_the_newest_span_and_is_checked_before_any_step_runs(tmp_path):
  from test_support import image_folders
  image_folders.write_dated_spans(str(tmp_path), per_class=2, dates=("2026-11-30",
                                                                    "2026-12-01"))
  pattern = str(tmp_path / image_folders.DATE_PATTERN)
  config = from_flags(["--dataset=image_dir", f"--image_dir={pattern}", "--train_spans=2"])
  assert config.data.is_span_pattern and config.data.train_spans == 2
  assert config.data.local_folder(pattern) == str(tmp_path / "2026-12-01")
  assert config.data.input_examples == 2 * 2 * 3  # Both days' files, for the Beam engine.
  (tmp_path / "2026-12-02").mkdir()
  with pytest.raises(ValueError) as error:
    from_flags(["--dataset=image_dir", f"--image_dir={pattern}"])
  assert str(error.value).endswith(f"the newest 2026-12-02 (span 20789) of the pattern {pattern} "
                                   f"is empty: {tmp_path}/2026-12-02 holds no files.")
  with pytest.raises(ValueError, match=f"2026-12-05 .* of the pattern .* is missing: no folder "
                     f"{tmp_path}/2026-12-05"):
    from_flags(["--dataset=image_dir", f"--image_dir={pattern}", "--span=2026-12-05"])
  assert from_flags(["--dataset=image_dir", f"--image_dir={pattern}",
                     "--span=2026-11-30"]).data.span == "2026-11-30"


def test_a_tfrecord_span_pattern_checks_the_newest_spans_splits(tmp_path):
  write_digits_tfrecord_dir(str(tmp_path / "1"), per_split_limit=3)
  (tmp_path / "2" / "train").mkdir(parents=True)
  (tmp_path / "2" / "train" / "x.tfrecord").write_bytes(b"")
  flags = ["--dataset=tfrecord", f"--tfrecord_dir={tmp_path}/{{SPAN}}", "--corruptions="]
  with pytest.raises(ValueError, match=f"has no {tmp_path}/2/eval"):
    from_flags(flags)
  config = from_flags(flags + ["--span=1"])
  parts = local_runner.local_parts(config)
  assert parts.tfrecord_input_base == str(tmp_path) and parts.span == "1"
  assert parts.tfrecord_splits == ("train", "eval", "test")


@pytest.mark.parametrize("flags, message", [
    (["--span=3"], "span='3': needs a span pattern in image_dir or tfrecord_dir"),
    (["--train_spans=2"], "train_spans=2: needs a span pattern in image_dir or tfrecord_dir"),
    (["--dataset=image_dir", "--image_dir=/d/{SPAN}", "--train_spans=0"],
     "train_spans=0: must be >= 1"),
    (["--dataset=image_dir", "--image_dir=/d/v{VERSION}"],
     "Version spec provided, but Span or Date spec is not present"),
    (["--dataset=image_dir", "--image_dir=/d/{SPAN}", "--span=2026-12-01"],
     "has {SPAN}, not a date"),
    (["--dataset=image_dir", "--image_dir=/d/{YYYY}{MM}{DD}",
      "--span=[[ScheduledTime.2006-01-02]]"], "expands [[ScheduledTime...]] in a recurring "
     "run's parameters from version 2.16.0 on"),
])
def test_span_flags_without_a_pattern_or_with_a_bad_value_are_config_errors(flags, message):
  with pytest.raises(ValueError) as error:
    from_flags(flags)
  assert message in str(error.value)


def test_an_s3_span_pattern_is_checked_at_the_folder_above_its_spans(s3, s3_server):
  root, bucket = s3
  s3_server.client().put_object(Bucket=bucket, Key="photos/2026-12-01/cat/a.png", Body=b"x")
  check_runs_here(from_flags(["--dataset=image_dir",
                              f"--image_dir={root}/photos/{{YYYY}}-{{MM}}-{{DD}}"]))
  with pytest.raises(ValueError, match="image_dir="):
    check_runs_here(from_flags(["--dataset=image_dir",
                                f"--image_dir={root}/nothing/{{YYYY}}-{{MM}}-{{DD}}"]))
