"""The tracked files speak of the software only: no numbered rounds of work, issue numbers,
protocols, talk of who did the work, or paths of the machine it was done on, in code, comments,
tests, docs or committed output. Such text means nothing to a user (the history keeps it).

The patterns are written so that this file does not match them itself."""
import os
import subprocess
from typing import List

import pytest

from tests.conftest import REPO

# What a trace of how the work was organised looks like: {what it is: extended regex}.
PROCESS_PATTERNS = {
    "a numbered round of work": r"[Ss]essions? [0-9]|(^|[^A-Za-z])[Rr]ounds? [0-9]",
    "an issue number": r"[Ii]ssues?[ -]#?[0-9]",
    "a development machine's path": r"/wor[k]/|runs/s[0-9]+/",
    "a protocol of the work": r"[Pp]rotocols? [A-Z]([^A-Za-z]|$)",
    "talk of who did the work": r"[Hh]elpers?'s? (read-only )?review|other agent[s]|"
                                r"agent[s]' jobs|the lea[d]'s",
}


def process_traces(repo: str) -> List[str]:
  """`file:line: what: text` of every tracked text file's line that matches a pattern."""
  found = []
  for what, pattern in PROCESS_PATTERNS.items():
    grep = subprocess.run(["git", "-C", repo, "grep", "-I", "-n", "-E", "-e", pattern],
                          capture_output=True, text=True)
    if grep.returncode not in (0, 1):  # 1: nothing found.
      raise RuntimeError(f"git grep failed in {repo}: {grep.stderr.strip()}")
    for line in grep.stdout.splitlines():
      path, number, text = line.split(":", 2)
      found.append(f"{path}:{number}: {what}: {text.strip()[:120]}")
  return sorted(found)


def _git_checkout() -> bool:
  return subprocess.run(["git", "-C", REPO, "rev-parse", "--is-inside-work-tree"],
                        capture_output=True).returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="not a git checkout: no tracked files to read")
def test_no_tracked_file_speaks_of_how_the_work_was_organised():
  traces = process_traces(REPO)
  assert not traces, "Text about the work, not the software:\n" + "\n".join(traces)


def _repo_with(tmp_path, files) -> str:
  repo = str(tmp_path)
  subprocess.run(["git", "init", "-q", repo], check=True)
  for name, text in files.items():
    os.makedirs(os.path.dirname(os.path.join(repo, name)), exist_ok=True)
    with open(os.path.join(repo, name), "w") as f:
      f.write(text)
  subprocess.run(["git", "-C", repo, "add", *files], check=True)
  return repo


# Each piece is split so that this file holds none of them whole.
PLANTED = {
    "a numbered round of work": ["Chosen in sess" "ion 21.", "Se" "ssions 13-17 chose it.",
                                 "Measured in rou" "nds 1 / 2 / 3."],
    "an issue number": ["Fixes iss" "ue 36.", "See Issue-" "35's table."],
    "a development machine's path": ["cmd --output_dir=/wo" "rk/runs/base",
                                     "logs in /tmp/x/ru" "ns/s27/ci.log"],
    "a protocol of the work": ["As prot" "ocol H says:", "Proto" "col C."],
    "talk of who did the work": ["a help" "er's read-only review", "two other ag" "ents' jobs",
                                 "it is the le" "ad's to accept"],
}


@pytest.mark.parametrize("what", sorted(PLANTED))
def test_each_kind_of_trace_is_found_and_named_with_its_file_and_line(tmp_path, what):
  lines = PLANTED[what]
  repo = _repo_with(tmp_path, {"docs/notes.md": "A clean first line.\n" + "\n".join(lines)})
  traces = process_traces(repo)
  assert traces == sorted(f"docs/notes.md:{number}: {what}: {line}"
                          for number, line in enumerate(lines, start=2))


def test_the_software_words_and_untracked_files_are_left_alone(tmp_path):
  repo = _repo_with(tmp_path, {"README.md": (
      "Views are rounded to uint8; a session of pytest; the issue tracker; the first round.\n"
      "googleapis/python-api-core#878 is upstream's. The helper rounds values to 2 places;\n"
      "an interval of log(1/T) around 0, and the T around 1.\n"
      "Protocol buffers (protobuf 4.25); /workspace/data and runs/latest are examples.\n")})
  with open(os.path.join(repo, "untracked.md"), "w") as f:
    f.write("Sess" "ion 4 wrote this.\n")
  assert process_traces(repo) == []
