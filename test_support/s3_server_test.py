"""The s3 tests' process (test_support/s3_server.py): one per session for the s3 tests of every
file, also across pytest-xdist's workers, with each test's own outcome.

Each check runs pytest on a small project of its own whose conftest takes the module's hooks;
its `s3` fixture stands in for the real one (which configures TensorFlow's S3 filesystem) and
reaches the session's moto server, so the process costs no TensorFlow import.
"""
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ElementTree

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFTEST = """
import os
import urllib.request

import pytest

from test_support import s3_server as s3_tests
from test_support.s3_server import (  # noqa: F401
    pytest_configure_node, pytest_pyfunc_call, pytest_runtest_logreport, pytest_sessionfinish,
    pytest_unconfigure, s3_server)

s3_tests.S3_TESTS_PROCESS_TIMEOUT_SECONDS = int(os.environ.get("PROCESS_TIMEOUT", "1800"))


@pytest.fixture
def s3(s3_server):
  if "S3_TESTS_REPORTS" not in os.environ:
    return None
  with urllib.request.urlopen(s3_server.endpoint_url + "/moto-api/", timeout=10):
    return s3_server.port  # The session's server answers.


def record(what):
  with open(os.environ["RECORD"], "a") as f:
    f.write(f"{what} {os.getpid()} {os.environ.get('PYTEST_XDIST_WORKER', '-')}\\n")


def server_started():
  server = s3_tests._session.get("server")
  return server is not None and server._server is not None
"""

A_TEST = """
from conftest import record, server_started

def test_a_passes(s3):
  record("a_passes")
  assert s3 > 0

def test_a_fails(s3):
  record("a_fails")
  assert 1 + 1 == 3, "a-fails-text"

def test_a_plain_after():
  record(f"a_plain/started={server_started()}")
"""

B_TEST = """
import os
import time

import pytest

from conftest import record, server_started

def test_b_skips(s3):
  record("b_skips")
  pytest.skip("b-skip-reason")

def test_b_passes(s3):
  record("b_passes")

def test_b_deselected(s3):
  record("b_deselected")

def test_b_sleeps(s3):
  record("b_sleeps")
  time.sleep(120)

def test_b_crashes(s3):
  record("b_crashes")
  os._exit(3)

def test_b_plain_after():
  record(f"b_plain/started={server_started()}")
"""


def _run(tmp_path, args, **environ):
  """The outcomes ({test name: (outcome, message)}) and the records of a pytest run on the small
  project."""
  for name, text in (("conftest.py", CONFTEST), ("a_test.py", A_TEST), ("b_test.py", B_TEST),
                     ("pytest.ini", "[pytest]\n")):
    (tmp_path / name).write_text(textwrap.dedent(text))
  record, junit = tmp_path / "record.txt", tmp_path / "junit.xml"
  subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
       *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env={**os.environ, "PYTHONPATH": REPO, "RECORD": str(record), **environ})
  outcomes = {}
  for case in ElementTree.parse(junit).iter("testcase"):
    outcome = next(iter(case), None)
    outcomes[case.get("name")] = (
        "passed" if outcome is None else outcome.tag,
        "" if outcome is None else f"{outcome.get('message')}\n{outcome.text}")
  lines = record.read_text().splitlines() if record.exists() else []
  return outcomes, [line.split() for line in lines]


def test_the_s3_tests_of_two_files_on_two_workers_run_in_one_process_each_with_its_outcome(
    tmp_path):
  outcomes, records = _run(tmp_path, ["-n", "2", "--dist", "loadfile",
                                      "-k", "not deselected and not sleeps"])
  plain = {name: (pid, worker) for name, pid, worker in records if "_plain/" in name}
  assert sorted(name.split("/")[0] for name in plain) == ["a_plain", "b_plain"]
  assert len({worker for _, worker in plain.values()}) == 2  # Each file on its own worker.
  # The worker that read the other's reports started no moto server.
  assert sorted(name.split("/")[1] for name in plain) == ["started=False", "started=True"]
  s3_tests = [(name, pid) for name, pid, _ in records if "_plain/" not in name]
  assert sorted(name for name, _ in s3_tests) == [  # Each selected one, once.
      "a_fails", "a_passes", "b_crashes", "b_passes", "b_skips"]
  s3_pids = {pid for _, pid in s3_tests}
  assert len(s3_pids) == 1 and not s3_pids & {pid for pid, _ in plain.values()}
  assert outcomes["test_a_passes"][0] == "passed" and outcomes["test_b_passes"][0] == "passed"
  assert outcomes["test_a_fails"][0] == "failure" and "a-fails-text" in outcomes["test_a_fails"][1]
  assert outcomes["test_b_skips"][0] == "skipped" and "b-skip-reason" in outcomes["test_b_skips"][1]
  assert "test_b_deselected" not in outcomes and "test_b_sleeps" not in outcomes
  status, message = outcomes["test_b_crashes"]  # It ended the process: no report of its own.
  assert status == "failure" and "exit status 3" in message and "reported nothing" in message
  assert outcomes["test_a_plain_after"][0] == outcomes["test_b_plain_after"][0] == "passed"


def test_an_s3_tests_process_past_its_time_is_killed_and_its_tests_fail_saying_so(tmp_path):
  outcomes, records = _run(tmp_path, ["-k", "sleeps"], PROCESS_TIMEOUT="5")
  assert [name for name, _, _ in records] == ["b_sleeps"]
  status, message = outcomes["test_b_sleeps"]
  assert status == "failure" and "killed after 5 s" in message and "reported nothing" in message
