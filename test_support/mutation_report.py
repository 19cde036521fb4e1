"""The kill rate of `make mutation`: reads the results mutmut left in mutants/ (one
`<module>.py.meta` JSON file per mutated module, its `exit_code_by_key` the test run's exit
status per mutant) and prints, per module and in all, how many mutants the fast tier killed,
leaving out the equivalent mutants listed in test_support/equivalent_mutants.txt.

  python -m test_support.mutation_report [--mutants DIR] [--equivalent FILE] [--fail-under PCT]

A mutant counts as killed when a test failed (or timed out: the mutant changed what the code
does), as surviving when every test passed, as "no tests" when no selected test calls its
function. The rate is killed / (killed + survived + no tests); "called" leaves out the no-tests
ones (what the selected tests check of the code they call). Mutants mutmut has not run yet are
counted apart, so a partial run says what it covered.
"""
import argparse
import collections
import json
import os
import sys
from typing import Dict, Iterable, List, Optional, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))
EQUIVALENT_FILE = os.path.join(_HERE, "equivalent_mutants.txt")
MUTANTS_DIR = os.path.join(os.path.dirname(_HERE), "mutants")

# mutmut's exit codes (mutmut/stats.py, status_by_exit_code), grouped as the rate reads them.
KILLED = {1: "killed", 3: "killed", 24: "timeout", -24: "timeout", 36: "timeout",
          152: "timeout", 255: "timeout", 37: "caught by type check"}
SURVIVED = {0: "survived"}
NO_TESTS = {5: "no tests", 33: "no tests"}  # No selected test calls the mutated function.
NOT_RUN = {None: "not checked", 34: "skipped", 2: "interrupted"}


def status(exit_code: Optional[int]) -> str:
  """'killed', 'survived', 'no tests', 'not run' or 'suspicious' (a crash: segfault, unknown
  status)."""
  if exit_code in KILLED:
    return "killed"
  if exit_code in SURVIVED:
    return "survived"
  if exit_code in NO_TESTS:
    return "no tests"
  if exit_code in NOT_RUN:
    return "not run"
  return "suspicious"


def read_equivalent(path: str) -> Dict[str, str]:
  """{mutant name: why it is harmless} from lines `name | reason` ('#' starts a comment)."""
  found = {}
  with open(path) as f:
    for number, line in enumerate(f, 1):
      line = line.split("#", 1)[0].strip()
      if not line:
        continue
      name, sep, reason = (part.strip() for part in line.partition("|"))
      if not sep or not name or not reason:
        raise ValueError(f"{path}:{number}: expected `mutant name | why it is harmless`, got "
                         f"{line!r}")
      found[name] = reason
  return found


def read_results(mutants_dir: str) -> Dict[str, Dict[str, Optional[int]]]:
  """{module path: {mutant name: exit code}} of every .meta file under mutants_dir."""
  results = {}
  for root, _, files in os.walk(mutants_dir):
    for name in sorted(files):
      if name.endswith(".py.meta"):
        path = os.path.join(root, name)
        with open(path) as f:
          meta = json.load(f)
        module = os.path.relpath(path, mutants_dir)[:-len(".meta")]
        results[module] = meta["exit_code_by_key"]
  return dict(sorted(results.items()))


Counts = collections.Counter


def tally(results: Dict[str, Dict[str, Optional[int]]],
          equivalent: Dict[str, str]) -> Tuple[Dict[str, Counts], List[str], List[str]]:
  """(per module counts of killed / survived / equivalent / not run / suspicious, the surviving
  non-equivalent mutants, listed equivalents that are not surviving mutants any more)."""
  counts, survivors, seen = {}, [], set()
  for module, codes in results.items():
    count = counts.setdefault(module, Counts())
    for mutant, code in sorted(codes.items()):
      kind = status(code)
      if mutant in equivalent and kind in ("survived", "no tests"):
        kind = "equivalent"
        seen.add(mutant)
      elif kind in ("survived", "no tests"):
        survivors.append(mutant)
      count[kind] += 1
  stale = sorted(set(equivalent) - seen)
  return counts, survivors, stale


def kill_rate(count: Counts, called_only: bool = False) -> Optional[float]:
  """Killed share of the mutants run, equivalent ones left out (with `called_only`, also those
  of functions no selected test calls); None when none ran."""
  judged = count["killed"] + count["survived"] + count["suspicious"] + (
      0 if called_only else count["no tests"])
  return 100.0 * count["killed"] / judged if judged else None


def report(counts: Dict[str, Counts], survivors: Iterable[str], stale: Iterable[str]) -> str:
  lines = [f"{'module':40} {'mutants':>7} {'killed':>6} {'survived':>8} {'no-tests':>8} "
           f"{'equiv.':>6} {'not-run':>7} {'rate':>7} {'called':>7}"]
  total = Counts()
  for module, count in counts.items():
    total.update(count)
    lines.append(_row(module, count))
  lines.append(_row("all", total))
  survivors, stale = list(survivors), list(stale)
  if survivors:
    lines += ["", "Surviving mutants (kill each with a test, or list it with the reason it is "
              "harmless in test_support/equivalent_mutants.txt; `mutmut show NAME` shows it):"]
    lines += [f"  {name}" for name in survivors]
  if stale:
    lines += ["", "Listed as equivalent but not a surviving mutant of this run (killed, renamed "
              "or not run): check and update test_support/equivalent_mutants.txt:"]
    lines += [f"  {name}" for name in stale]
  return "\n".join(lines)


def _row(module: str, count: Counts) -> str:
  rates = [kill_rate(count), kill_rate(count, called_only=True)]
  return (f"{module:40} {sum(count.values()):7d} {count['killed']:6d} "
          f"{count['survived'] + count['suspicious']:8d} {count['no tests']:8d} "
          f"{count['equivalent']:6d} {count['not run']:7d} " +
          " ".join(f"{'-' if rate is None else f'{rate:.1f}%':>7}" for rate in rates))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--mutants", default=MUTANTS_DIR,
                      help="the mutants/ directory `mutmut run` wrote")
  parser.add_argument("--equivalent", default=EQUIVALENT_FILE,
                      help="the equivalent mutants, one `name | reason` a line")
  parser.add_argument("--fail-under", type=float, default=None,
                      help="exit 1 when the overall kill rate (percent) is below this")
  args = parser.parse_args(argv)
  results = read_results(args.mutants)
  if not results:
    print(f"No mutmut results under {args.mutants}: run `make mutation` first.", file=sys.stderr)
    return 2
  counts, survivors, stale = tally(results, read_equivalent(args.equivalent))
  print(report(counts, survivors, stale))
  rate = kill_rate(sum(counts.values(), Counts()))
  if args.fail_under is not None and (rate is None or rate < args.fail_under):
    print(f"Kill rate {'-' if rate is None else f'{rate:.1f}%'} is below {args.fail_under}%.",
          file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
