"""bench/*.py's --help: each script's docstring's first paragraph, whole, and what each flag
means. The parsers are built in this process (`build_parser`), so TensorFlow and TFX load once."""
import argparse
import glob
import importlib
import os

import pytest

from tests.conftest import REPO


def _scripts():
  """The bench scripts with a command line: those with a main()."""
  for path in sorted(glob.glob(os.path.join(REPO, "bench", "*.py"))):
    with open(path) as f:
      if "\ndef main(" in f.read():
        yield os.path.basename(path)[:-len(".py")]


@pytest.mark.parametrize("name", list(_scripts()))
def test_help_is_the_docstrings_first_paragraph_and_says_what_every_flag_means(name):
  module = importlib.import_module(f"bench.{name}")
  parser = module.build_parser()
  text = " ".join(parser.format_help().split())  # Formatting fails on a stray % in a help.
  assert module.__doc__.startswith(parser.description)
  assert parser.description.endswith(".") and " ".join(parser.description.split()) in text
  unexplained = [action.option_strings for action in parser._actions
                 if action.help != argparse.SUPPRESS and len((action.help or "").split()) < 3]
  assert not unexplained, f"{name}: flags without a help that says what they mean"
