"""`make mutation`'s kill rate, read from results laid out as mutmut writes them."""
import json

import pytest

from test_support import mutation_report


def _meta(directory, module, exit_codes):
  path = directory / (module + ".meta")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps({"exit_code_by_key": exit_codes, "durations_by_key": {},
                              "estimated_durations_by_key": {}}))


@pytest.fixture
def mutants(tmp_path):
  directory = tmp_path / "mutants"
  # killed, killed (pytest internal error), timeout, survived, no tests, not run, segfault.
  _meta(directory, "components/pusher.py", {
      "components.pusher.x_a__mutmut_1": 1, "components.pusher.x_a__mutmut_2": 3,
      "components.pusher.x_a__mutmut_3": 36, "components.pusher.x_a__mutmut_4": 0,
      "components.pusher.x_b__mutmut_1": 33, "components.pusher.x_b__mutmut_2": None,
      "components.pusher.x_b__mutmut_3": -11})
  _meta(directory, "pipeline/evaluation.py", {
      "pipeline.evaluation.x_c__mutmut_1": 1, "pipeline.evaluation.x_c__mutmut_2": 0})
  return directory


def _equivalent(tmp_path, text):
  path = tmp_path / "equivalent.txt"
  path.write_text(text)
  return str(path)


def test_the_rate_counts_killed_and_timed_out_against_survivors_and_crashes(mutants, tmp_path,
                                                                            capsys):
  equivalent = _equivalent(tmp_path, "# comment\npipeline.evaluation.x_c__mutmut_2 | a log line\n")
  assert mutation_report.main(["--mutants", str(mutants), "--equivalent", equivalent]) == 0
  out = capsys.readouterr().out
  rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:4]}
  # mutants, killed, survived (and segfault), no tests, equivalent, not run, rate, called rate.
  assert rows["components/pusher.py"] == ["7", "3", "2", "1", "0", "1", "50.0%", "60.0%"]
  assert rows["pipeline/evaluation.py"] == ["2", "1", "0", "0", "1", "0", "100.0%", "100.0%"]
  assert rows["all"] == ["9", "4", "2", "1", "1", "1", "57.1%", "66.7%"]
  survivors = out.split("Surviving mutants")[1].split()
  assert "components.pusher.x_a__mutmut_4" in survivors
  assert "components.pusher.x_b__mutmut_1" in survivors
  assert "pipeline.evaluation.x_c__mutmut_2" not in survivors


def test_a_listed_mutant_that_no_longer_survives_is_named_and_the_bound_fails(mutants, tmp_path,
                                                                              capsys):
  equivalent = _equivalent(tmp_path, "components.pusher.x_a__mutmut_1 | was harmless\n")
  assert mutation_report.main(["--mutants", str(mutants), "--equivalent", equivalent,
                               "--fail-under", "90"]) == 1
  out = capsys.readouterr().out
  assert out.split("Listed as equivalent")[1].split(":\n")[1].split() == [
      "components.pusher.x_a__mutmut_1"]


def test_an_equivalent_without_its_reason_is_refused_naming_the_line(tmp_path):
  with pytest.raises(ValueError, match=r"equivalent.txt:2: expected `mutant name \| why"):
    mutation_report.read_equivalent(_equivalent(tmp_path, "# ok\ncomponents.pusher.x_a\n"))


def test_no_results_exit_2(tmp_path, capsys):
  assert mutation_report.main(["--mutants", str(tmp_path)]) == 2
  assert "run `make mutation` first" in capsys.readouterr().err
