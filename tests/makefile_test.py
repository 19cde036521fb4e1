"""The Makefile's targets get their arguments from `make TARGET ARGS=...` only."""
import os
import subprocess

import pytest

from tests.conftest import REPO


def _command(target, *make_args, environ_args=None):
  """The line `make -n` prints for the target's command (nothing runs)."""
  environ = {**os.environ, "ARGS": environ_args} if environ_args else dict(os.environ)
  result = subprocess.run(["make", "-n", target, *make_args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("target, command", [("run", ".venv/bin/python -m local_runner"),
                                             ("check", '.venv/bin/python -m pytest -m "not e2e '
                                                       'and not container"')])
def test_args_come_from_the_command_line_and_never_from_the_environment(target, command):
  assert _command(target) == command
  assert _command(target, environ_args="--from_the_environment") == command
  assert _command(target, "ARGS=--train_steps=2 -k x",
                  environ_args="--from_the_environment") == command + " --train_steps=2 -k x"
