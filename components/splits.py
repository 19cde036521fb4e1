"""The split by key: which of train, eval and test an example belongs to, from its key alone.

A stable hash (SHA-256, not Python's salted `hash()`), so an example lands in the same split in
every process, on every run and machine: Beam's workers, the image-folder ingest and the next
nightly run all agree.
"""
import hashlib

SPLITS = ("train", "eval", "test")


def split_for_key(key: str, eval_fraction: float, test_fraction: float) -> str:
  """Assigns a key to train, eval or test by a hash of the key alone."""
  digest = hashlib.sha256(key.encode("utf-8")).digest()
  position = int.from_bytes(digest[:8], "big") / 2.0**64
  if position < test_fraction:
    return "test"
  if position < test_fraction + eval_fraction:
    return "eval"
  return "train"
