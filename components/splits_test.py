"""The split by key: a pure function of the key, the same in every process, with the fractions
asked for."""
import collections
import json
import os
import subprocess
import sys

from components.splits import split_for_key

EVAL_FRACTION, TEST_FRACTION = 0.1, 0.3  # Unequal, so that swapping the two shows.


def test_split_for_key_is_a_pure_function_of_the_key():
  keys = [f"example-{i}" for i in range(5000)]
  first = [split_for_key(k, EVAL_FRACTION, TEST_FRACTION) for k in keys]
  second = [split_for_key(k, EVAL_FRACTION, TEST_FRACTION)
            for k in reversed(keys)][::-1]
  assert first == second
  counts = collections.Counter(first)
  assert abs(counts["train"] / 5000 - 0.6) < 0.03
  assert abs(counts["eval"] / 5000 - EVAL_FRACTION) < 0.03
  assert abs(counts["test"] / 5000 - TEST_FRACTION) < 0.03


# Known keys and their splits under (EVAL_FRACTION, TEST_FRACTION): the position each key's
# SHA-256 gives, [0, 1), is 0.1718, 0.8884, 0.2908, 0.3013, 0.4231 and 0.0766 (test below 0.3,
# eval below 0.4).
PINNED_SPLITS = {"digits-0000": "test", "digits-0001": "train", "digits-0002": "test",
                 "digits-0007": "eval", "digits-0006": "train", "digits-0009": "test"}
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _splits_in_a_new_process(keys, hash_seed):
  code = ("import json, sys; from components.splits import split_for_key; "
          f"print(json.dumps([split_for_key(k, {EVAL_FRACTION}, {TEST_FRACTION}) "
          "for k in json.loads(sys.argv[1])]))")
  result = subprocess.run([sys.executable, "-c", code, json.dumps(keys)], cwd=_REPO,
                          env={**os.environ, "PYTHONHASHSEED": str(hash_seed),
                               "PYTHONPATH": _REPO},
                          capture_output=True, text=True, check=True)
  return json.loads(result.stdout.strip().splitlines()[-1])


def test_split_for_key_is_the_same_in_every_process_and_pinned_for_known_keys():
  """Beam's worker processes and the next nightly run split alike: a salted hash would not."""
  keys = list(PINNED_SPLITS) + [f"cifar10-train_{i:05d}" for i in range(200)]
  here = [split_for_key(k, EVAL_FRACTION, TEST_FRACTION) for k in keys]
  assert here[:len(PINNED_SPLITS)] == list(PINNED_SPLITS.values())
  assert _splits_in_a_new_process(keys, 1) == here
  assert _splits_in_a_new_process(keys, 2) == here


def test_split_for_key_without_test_fraction_never_picks_test():
  assert {split_for_key(f"k{i}", 0.2, 0.0) for i in range(2000)} == {"train",
                                                                                    "eval"}
