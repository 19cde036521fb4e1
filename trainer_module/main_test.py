"""`python -m trainer_module`'s commands (__main__.py): each one's --help, and arguments it does
not take named."""
import dataclasses

import pytest

from test_support.help_text import printed_helps
from trainer_module.__main__ import EnsembleFlags, main


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--members=a", "--help"]])
def test_ensemble_help_lists_every_flag_with_what_it_means(argv, capsys):
  assert main(["ensemble", *argv]) == 0
  out = capsys.readouterr().out
  assert out.startswith("`python -m trainer_module ensemble --members=DIR,DIR,...")
  helps = printed_helps(out)
  assert list(helps) == [field.name for field in dataclasses.fields(EnsembleFlags)]
  assert not [name for name, text in helps.items() if len(text.split()) < 2], helps
  # Helps defined once: the trainer's field of the same name, the trainer's path.
  assert helps["num_bins"] == "Equal-width confidence bins of the expected calibration error."
  assert helps["transform_output"] == "Transform's transform_graph directory."


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_inspect_help_is_its_usage(flag, capsys):
  assert main(["inspect", flag]) == 0
  out, err = capsys.readouterr()
  assert out.startswith("`python -m trainer_module inspect PATH`: the variables") and not err


def test_the_trainers_help_points_to_each_commands_own(capsys):
  assert main(["--help"]) == 0
  out = capsys.readouterr().out
  assert "`ensemble --help` (with its flags), `inspect --help`: that command's usage." in out


@pytest.mark.parametrize("argv, message", [
    (["ensemble", "--bogus=1"], "Unknown flag --bogus. Known flags: --ensemble_objective"),
    (["ensemble", "-x"], "Unexpected argument '-x'"),
    (["inspect", "--bogus", "-v"], "Unknown argument --bogus, -v."),
    (["inspect"], "Usage: python -m trainer_module inspect PATH"),
    (["--bogus=1"], "Unknown flag --bogus."),
])
def test_an_argument_a_command_does_not_take_exits_2_naming_it(argv, message, capsys):
  assert main(argv) == 2
  assert message in capsys.readouterr().err
