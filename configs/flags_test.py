"""The flag parser and the --help every CLI prints."""
import dataclasses
import io
import contextlib

import pytest

from configs import groups
from configs.flags import field_help, name_value_pairs, parse_config_flags, parse_flags
from kubeflow.cluster_config import ClusterConfig, usage as cluster_usage
from pipeline.config import CONFIG_FLAG, usage
from trainer_module.config import TrainerConfig

# Every group class of a Kubeflow run's config (the pipeline's, the trainer's and the cluster's).
CONFIGS = tuple(cls for _, _, cls in groups.sections(ClusterConfig))


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
def test_every_field_says_what_it_means_in_its_trailing_comment(cls):
  helps = field_help(cls)
  assert {f.name for f in dataclasses.fields(cls)} == set(helps)
  assert not [name for name, text in helps.items() if len(text.split()) < 2], helps


def test_help_is_the_trailing_comment_then_the_block_above_the_first_field():
  @dataclasses.dataclass
  class Example:
    # Learning rate schedule: warm-up then decay.
    rate: float = 0.1  # Peak learning rate.
    decay: float = 0.2  # Factor at each decay epoch.
    name: str = "#not a comment"  # Quoted hashes are values.

  assert field_help(Example) == {
      "rate": "Peak learning rate. Learning rate schedule: warm-up then decay.",
      "decay": "Factor at each decay epoch.", "name": "Quoted hashes are values."}


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
