"""The flag parser and the --help every CLI prints."""
import dataclasses
import io
import contextlib
import re

import pytest

from configs import groups
from configs.flags import (field_help, name_value_pairs, over_defaults, parse_config_flags,
                           parse_flags)
from kubeflow import cli as kubeflow_cli
from kubeflow.cluster_config import ClusterConfig, usage as cluster_usage
from local_runner import runner as local_runner
from pipeline.config import CONFIG_FLAG, from_flags, usage
from test_support.help_text import printed_helps
from trainer_module.calibration import registry as calibration_methods
from trainer_module.config import TrainerConfig

# Every group class of a Kubeflow run's config (the pipeline's, the trainer's and the cluster's).
CONFIGS = tuple(cls for _, _, cls in groups.sections(ClusterConfig))


# What `python -m local_runner --help` and `python -m kubeflow --help` print for each flag.
LOCAL_HELPS = printed_helps(usage())
KUBEFLOW_HELPS = printed_helps(cluster_usage("python -m kubeflow compile"))


def _sentences(text):
  return [s for s in re.split(r"(?<=\.)\s+", text) if len(s.split()) >= 3]


def _flags():
  return list(groups.leaf_paths(ClusterConfig))


def test_every_field_name_is_unique_across_the_groups_so_a_flat_flag_names_one_field():
  names = [f.name for cls in CONFIGS for f in dataclasses.fields(cls)
           if f.name not in groups.group_fields(cls)]
  assert len(names) == len(set(names)) == len(_flags())
  with pytest.raises(TypeError, match=r"\['depth'\] in two groups"):
    groups.leaf_paths(dataclasses.make_dataclass(
        "Twice", [("model", TrainerConfig), ("depth", int, dataclasses.field(default=1))]))


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda cls: cls.__name__)
def test_every_field_has_a_help(cls):
  assert {f.name for f in dataclasses.fields(cls)} == set(field_help(cls))


def test_the_local_help_lists_the_kubeflow_help_s_flags_but_the_cluster_s():
  cluster = set(groups.leaf_paths(groups.group_fields(ClusterConfig)["kubeflow"]))
  assert set(LOCAL_HELPS) == set(KUBEFLOW_HELPS) - cluster
  assert all(LOCAL_HELPS[name] == KUBEFLOW_HELPS[name] for name in LOCAL_HELPS)


@pytest.mark.parametrize("name", sorted(KUBEFLOW_HELPS))
def test_every_flag_s_help_is_its_own_field_s_comment_in_whole_sentences_once(name):
  text = KUBEFLOW_HELPS[name]
  assert text and text.endswith("."), text
  others = [(other, sentence) for other, help_text in KUBEFLOW_HELPS.items() if other != name
            for sentence in _sentences(help_text) if sentence in text]
  assert not others, f"--{name}'s help holds other flags' text: {others}"
  words = re.findall(r"\w+", text.lower())
  runs = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
  assert not {run for run in runs if runs.count(run) > 1}, f"--{name} says it twice: {text}"


def test_temperature_fit_names_its_methods_and_the_flags_beside_it_keep_to_their_own():
  helps = KUBEFLOW_HELPS
  fit = helps["temperature_fit"]
  assert fit.startswith("How temperature scaling (trainer_module/calibration/) fits T. ")
  assert all(f" {method}: " in fit for method in calibration_methods.NAMES), fit
  examples = helps["validation_corruption_examples"]
  assert examples.startswith("Eval images per validation slice. ")
  assert not [method for method in calibration_methods.NAMES
              if re.search(rf"\b{method}\b", examples)], examples
  assert helps["train_steps"].count("this many steps") == 1
  assert helps["max_accuracy_drop"] == "Largest eval accuracy drop allowed against production."
  assert helps["max_eval_ece"].startswith("Upper bound of the calibrated eval ECE. 0.10: ")
  assert helps["max_corrupted_nll"] == "Upper bound of cNLL."
  for heading in ("The rest of the gate", "Calibration under shift", "Checkpoints:"):
    assert not [name for name, text in helps.items() if heading in text], heading


def test_help_is_the_end_of_line_comment_and_its_continuation_then_the_block_above():
  @dataclasses.dataclass  # Outside the fields: not read.
  class Example:
    """A heading (a comment block with a blank line below it) documents no one field."""
    # Schedule: warm-up, then decay.

    # Reached at the end of warm-up.
    rate: float = 0.1  # Peak learning rate,
                       # per 128 examples.
    decay: float = 0.2  # Factor at each decay epoch.
    # Quoted hashes are values.
    name: str = "#not a comment"

    def double(self):  # A method's comments are no field's.
      # Nor this one.
      return 2 * self.rate
      # Nor one after a method's last statement.

  assert field_help(Example) == {
      "rate": "Peak learning rate, per 128 examples. Reached at the end of warm-up.",
      "decay": "Factor at each decay epoch.", "name": "Quoted hashes are values."}

  @dataclasses.dataclass
  class NoFields:
    """A group may hold nothing yet."""

  assert field_help(NoFields) == {}

  @dataclasses.dataclass
  class Misaligned:
    rate: float = 0.1  # Peak learning rate,
                      # per 128 examples.

  with pytest.raises(ValueError, match=r"Misaligned, line 4 .* nor starts at the fields' "
                     r"indentation: '# per 128 examples.'"):
    field_help(Misaligned)

  @dataclasses.dataclass
  class MethodBetweenFields:
    rate: float = 0.1  # Peak learning rate.

    @property  # A decorator's comment is its method's.
    def double(self):
      return 2 * self.rate
      # A method's own, below its last line.

    decay: float = 0.2  # Factor at each decay epoch,
                       # misaligned below a field after the method.

  with pytest.raises(ValueError, match=r"MethodBetweenFields, line 11 .* '# misaligned below"):
    field_help(MethodBetweenFields)


def test_pipeline_help_has_one_section_per_group_headed_by_its_docstring():
  text = cluster_usage("python -m kubeflow compile")
  for heading, path, cls in groups.sections(ClusterConfig):
    assert heading == cls.__doc__.strip().splitlines()[0].rstrip(".")
    section = text.split(f"\n{heading} ({path.rstrip('.')}):\n")[1].split("\n\n")[0]
    for field in dataclasses.fields(cls):
      assert f"  --{field.name}  (default: " in section
  for name in _flags() + [CONFIG_FLAG]:
    assert f"  --{name}  (default: " in text
  assert "Wide ResNet depth, 6n+4" in text
  assert "Names the run's directories and MLMD contexts." in text  # The pipeline's own fields.
  assert "  --image  (default: " not in usage()  # Cluster flags only for the Kubeflow CLI.


def test_a_flag_is_its_flat_field_name_or_its_dotted_path():
  assert parse_config_flags(["--model.depth=16", "--train_epochs=3"], TrainerConfig) == {
      "depth": 16, "train_epochs": 3}
  with pytest.raises(ValueError, match="Unknown flag --training.depth"):
    parse_config_flags(["--training.depth=16"], TrainerConfig)


def test_the_standalone_trainer_help_lists_its_paths_and_every_trainer_flag():
  from trainer_module.__main__ import main
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    assert main(["--help"]) == 0
  text = out.getvalue()
  assert "\npaths:\n  --train_files  (default: ())" in text
  for name in TrainerConfig().to_dict():
    assert f"  --{name}  (default: " in text


def test_flags_parse_by_type_and_bad_values_are_named():
  hints = {"depth": int, "lr_decay_epochs": tuple[int, ...], "augmix": bool}
  assert parse_flags(["--depth", "16", "--lr_decay_epochs=3,6", "--augmix=yes"], hints) == {
      "depth": 16, "lr_decay_epochs": (3, 6), "augmix": True}
  with pytest.raises(ValueError, match="--depth: 'x' is not a valid int"):
    parse_flags(["--depth=x"], hints)
  with pytest.raises(ValueError, match="Unknown flag --dept"):
    parse_flags(["--dept=1"], hints)
  with pytest.raises(ValueError, match="needs a value"):
    name_value_pairs(["--depth"])


@pytest.mark.parametrize("argv", [
    ["--train_epochs=1", "--train_epochs=2"],
    ["--train_epochs", "1", "--depth=16", "--train_epochs", "2"],
    ["--train_epochs=1", "--trainer.training.train_epochs=2"],  # Its dotted path: one field.
])
def test_a_flag_given_twice_is_refused_by_name(argv, capsys):
  message = "Flag --train_epochs is given more than once"
  with pytest.raises(ValueError, match=f"{message} \\(--train_epochs=1 and --train_epochs=2\\)"):
    from_flags(argv)
  assert local_runner.main(argv) == 2
  assert kubeflow_cli.main(["compile", "--image=i", *argv]) == 2
  assert kubeflow_cli.main(["upload", "--package=a.yaml", "--package=b.yaml"]) == 2
  err = capsys.readouterr().err
  assert err.count(message) == 2 and "Flag --package is given more than once" in err


def test_a_caller_s_own_flags_give_way_to_its_user_s():
  assert over_defaults(["--depth=10", "--train_epochs=6"], ["--train_epochs", "3"]) == [
      "--depth=10", "--train_epochs", "3"]
  assert from_flags(over_defaults(["--depth=10", "--train_epochs=6"], ["--train_epochs=3"])
                    ).trainer.training.train_epochs == 3
  dotted = ["--trainer.training.train_epochs=3"]  # The same flag by its path.
  assert over_defaults(["--depth=10", "--train_epochs=6"], dotted) == ["--depth=10", *dotted]
  assert over_defaults(["--trainer.model.depth=10"], ["--depth=16"]) == ["--depth=16"]
