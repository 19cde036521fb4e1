"""The Makefile's targets get their arguments from `make TARGET ARGS=...` only."""
import os
import subprocess

import pytest

from tests.conftest import REPO


# What an outer `make test` passes down to a make run inside it (its level, its flags): a nested
# make would print "make[1]: Entering directory" lines around the command.
_OUTER_MAKE_VARIABLES = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")


def _command(target, *make_args, environ_args=None):
  """The line `make -n` prints for the target's command (nothing runs), as a shell's make would."""
  environ = {name: value for name, value in os.environ.items()
             if name not in _OUTER_MAKE_VARIABLES}
  if environ_args:
    environ["ARGS"] = environ_args
  result = subprocess.run(["make", "-n", target, *make_args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("target, command", [("run", ".venv/bin/python -m local_runner"),
                                             ("check", ".venv/bin/python -m pytest -n auto --dist "
                                                       'loadfile --no-loadscope-reorder -m "not '
                                                       'e2e and not container"')])
def test_args_come_from_the_command_line_and_never_from_the_environment(target, command):
  assert _command(target) == command
  assert _command(target, environ_args="--from_the_environment") == command
  assert _command(target, "ARGS=--train_steps=2 -k x",
                  environ_args="--from_the_environment") == command + " --train_steps=2 -k x"
