"""The Evaluator's one input: the clean eval and test splits and corrupted copies of the test
images, tagged for slicing, so one evaluation gates on both (docs/pipeline.md, "Evaluation and
the gate").
"""
import ast
import dataclasses
import hashlib
import importlib.metadata
import logging
import os
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts

from components import image_sources
from trainer_module import reference_corruptions as corruptions
from trainer_module.features import EXAMPLE_KEY, IMAGE_KEY, LABEL_KEY

log = logging.getLogger(__name__)

EVAL_SET_KEY = "eval_set"  # bytes: which of the sets below an example belongs to.
CORRUPTION_KEY = "corruption"  # bytes, corrupted examples only.
SEVERITY_KEY = "severity"  # int64 in [1, 5], corrupted examples only.
FAMILY_KEY = "corruption_family"  # bytes, corrupted examples only: noise/blur/weather/digital.
# bytes: the key of the clean image an example was made from (its own key when clean); the
# Evaluator's bootstrap resamples these (components/calibration_metrics.py, MeanSliceECE).
SOURCE_IMAGE_KEY = "source_image"
EVAL, TEST, CORRUPTED = "eval", "test", "corrupted"
SOURCES = ("generated", "cifar10_corrupted")

_FILE_NAME = "data_tfrecord-00000-of-00001.gz"
Record = Tuple[str, bytes, int]  # key, PNG, label.


@dataclasses.dataclass(frozen=True)
class EvaluationSet:
  """EvaluationSetGen's examples: PNG bytes, labels, which set (eval/test/corrupted), the
  corruption_severity slice of corrupted ones and the clean test image each was made from."""
  pngs: np.ndarray
  labels: np.ndarray
  eval_sets: np.ndarray
  slices: np.ndarray
  source_keys: np.ndarray


def read_evaluation_set(uri: str) -> EvaluationSet:
  spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
          LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
          EXAMPLE_KEY: tf.io.FixedLenFeature([], tf.string),
          EVAL_SET_KEY: tf.io.FixedLenFeature([], tf.string),
          CORRUPTION_KEY: tf.io.FixedLenFeature([], tf.string, default_value=""),
          SEVERITY_KEY: tf.io.FixedLenFeature([], tf.int64, default_value=0)}
  files = sorted(tf.io.gfile.glob(os.path.join(uri, "Split-*", "*")))
  if not files:
    raise FileNotFoundError(f"No evaluation set examples under {uri}.")
  columns = {key: [] for key in spec}
  for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1024):
    for key, value in tf.io.parse_example(batch, spec).items():
      columns[key].append(value.numpy())
  c = {key: np.concatenate(value) for key, value in columns.items()}
  corruption = _text(c[CORRUPTION_KEY])
  slices = np.where(corruption == "", "",
                    np.char.add(np.char.add(corruption, "_"),
                                c[SEVERITY_KEY].astype(str)))
  keys = _text(c[EXAMPLE_KEY])
  # make_evaluation_example's keys read back: a source key may hold "/" (an image folder's
  # paths), its corrupted versions add one more; this also reads sets made before the
  # SOURCE_IMAGE_KEY feature.
  source_keys = np.where(corruption == "", keys, np.char.rpartition(keys, "/")[:, 0])
  return EvaluationSet(c[IMAGE_KEY], c[LABEL_KEY], _text(c[EVAL_SET_KEY]), slices,
                       source_keys)


def _text(column: np.ndarray) -> np.ndarray:
  """A string feature's bytes as text: keys are UTF-8 (a photo named `café 猫.jpg`), which
  numpy's astype(str) would read as ASCII."""
  return np.array([value.decode("utf-8") for value in column], dtype=str)


def _read_split(examples_uri: str, split: str) -> List[Record]:
  """A split's (key, png, label) records, sorted by key so every run sees the same order."""
  files = sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
  records = []
  for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP"):
    feature = tf.train.Example.FromString(serialized.numpy()).features.feature
    records.append((feature[EXAMPLE_KEY].bytes_list.value[0].decode("utf-8"),
                    feature[IMAGE_KEY].bytes_list.value[0], feature[LABEL_KEY].int64_list.value[0]))
  return sorted(records)


def make_evaluation_example(source_key: str, png: bytes, label: int, eval_set: str,
                            corruption: Optional[str] = None, severity: Optional[int] = None):
  """An example of the evaluation set. A corrupted one is keyed
  `<source_key>/<corruption>_<severity>` (read_evaluation_set's source_keys read it back), and
  every example names its source image under SOURCE_IMAGE_KEY."""
  key = source_key if corruption is None else f"{source_key}/{corruption}_{severity}"
  example = image_sources.make_example(key, png, label)
  feature = example.features.feature
  feature[EVAL_SET_KEY].bytes_list.value.append(eval_set.encode("utf-8"))
  feature[SOURCE_IMAGE_KEY].bytes_list.value.append(source_key.encode("utf-8"))
  if corruption is not None:
    feature[CORRUPTION_KEY].bytes_list.value.append(corruption.encode("utf-8"))
    feature[SEVERITY_KEY].int64_list.value.append(severity)
    family = corruptions.FAMILY_OF[corruption]
    feature[FAMILY_KEY].bytes_list.value.append(family.encode("utf-8"))
  return example


# Libraries whose code makes the corrupted pixels: a new version invalidates the cache.
_CORRUPTION_LIBRARIES = ("tensorflow-datasets", "scikit-image", "scipy", "numpy", "Wand",
                         "opencv-python", "opencv-python-headless")


def corruption_cache_dir() -> str:
  """Where generated slices are cached: $CORRUPTION_CACHE_DIR, else under $XDG_CACHE_HOME
  (~/.cache)."""
  return os.environ.get("CORRUPTION_CACHE_DIR") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
      "wrn_image_classifier", "corrupted_slices")


def source_fingerprint(source: str) -> bytes:
  """The code in `source`, not its layout: the syntax tree without docstrings, line numbers or
  comments, so a reworded comment or a reflowed line keeps the cache and a changed statement
  does not."""
  tree = ast.parse(source)
  for node in ast.walk(tree):
    body = getattr(node, "body", None)
    if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)):
      node.body = body[1:] or [ast.Pass()]
  return ast.dump(tree, include_attributes=False).encode()


def examples_code_fingerprint() -> str:
  """A hash of the code that writes the evaluation set's examples (this module, the example and
  PNG encoding, the corruptions): TFX's cache key does not cover a component's code, so the
  pipeline passes it to EvaluationSetGen, which then runs again when the code changes, instead
  of reusing a set of the old format (say, without SOURCE_IMAGE_KEY)."""
  digest = hashlib.sha256()
  for path in (__file__, image_sources.__file__, corruptions.__file__):
    with open(path, encoding="utf-8") as source:
      digest.update(source_fingerprint(source.read()))
  return digest.hexdigest()


def _code_fingerprint() -> bytes:
  """reference_corruptions' code and the versions of the libraries it calls."""
  digest = hashlib.sha256()
  with open(corruptions.__file__, encoding="utf-8") as source:
    digest.update(source_fingerprint(source.read()))
  for library in _CORRUPTION_LIBRARIES:
    try:
      digest.update(f"{library}={importlib.metadata.version(library)};".encode())
    except importlib.metadata.PackageNotFoundError:
      digest.update(f"{library}=none;".encode())
  return digest.digest()


def _slice_cache_path(cache_dir: str, code: bytes, chosen, name: str, severity: int) -> str:
  digest = hashlib.sha256(code + f"{name}_{severity}".encode())
  for key, image, _ in chosen:
    digest.update(key.encode() + b"\0" + str(image.shape).encode() + image.tobytes())
  return os.path.join(cache_dir, f"{name}_{severity}-{digest.hexdigest()[:32]}.npy")


def _checksum_path(path: str) -> str:
  return path + ".sha256"


def _sha256_of_file(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _cached_slice_problem(path: str, shape: Tuple[int, ...]) -> Optional[str]:
  """Why the entry at `path` cannot be trusted, or None when it is whole: its bytes match the
  checksum written beside it, and its header says uint8 of `shape`."""
  try:
    with open(_checksum_path(path)) as f:
      expected = f.read().split()
    if not expected:
      return "its checksum file is empty"
    if _sha256_of_file(path) != expected[0]:
      return "its bytes do not match the checksum written beside it"
    images = np.load(path, mmap_mode="r", allow_pickle=False)
  except FileNotFoundError as error:
    return f"{error.filename} is missing"
  except (OSError, ValueError, EOFError) as error:
    return f"{type(error).__name__}: {error}"
  if images.dtype != np.uint8 or images.shape != shape:
    return f"it holds {images.dtype} {images.shape}, not uint8 {shape}"
  return None


def cached_slice_is_whole(path: str, shape: Tuple[int, ...]) -> bool:
  """Whether an entry at `path` can be used: False when there is none, or when it is damaged
  (truncated, emptied, of another dtype or shape, its bytes not those it was written with) or
  unreadable, which a warning naming the file says; the slice is then made again."""
  if not os.path.exists(path):
    return False
  problem = _cached_slice_problem(path, shape)
  if problem is not None:
    log.warning("Corruption cache entry %s cannot be used (%s): making the slice again.", path,
                problem)
  return problem is None


def read_cached_slice(path: str, shape: Tuple[int, ...]) -> Optional[np.ndarray]:
  """The uint8 images of `shape` cached at `path` if the entry is whole, else None."""
  return np.load(path, allow_pickle=False) if cached_slice_is_whole(path, shape) else None


def _write_atomically(path: str, write) -> None:
  """write(file) into a hidden file beside `path`, renamed to it once whole: a concurrent or
  killed run never reads half, and a failed write leaves nothing. Created with mode 0666 less
  the umask (0644, 0640 ...), so a cache shared by a group can be read by its members."""
  temporary = os.path.join(os.path.dirname(path),
                           f".{os.path.basename(path)}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
  handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  try:
    with os.fdopen(handle, "wb") as out:
      write(out)
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise


def write_cached_slice(path: str, images: np.ndarray) -> None:
  """The entry, then its checksum (sha256sum's format) beside it; each written atomically."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  _write_atomically(path, lambda out: np.save(out, images, allow_pickle=False))
  line = f"{_sha256_of_file(path)}  {os.path.basename(path)}\n"
  _write_atomically(_checksum_path(path), lambda out: out.write(line.encode()))


def generated_corruptions(test_records: List[Record], names: List[str], per_corruption: int,
                          workers: int = 0,
                          cache_dir: Optional[str] = None) -> Iterator[tf.train.Example]:
  """Corruption x severity slices of the chosen test images, slice by slice; `workers`
  processes make them (0: as many as pay, see reference_corruptions.pool_size). With
  `cache_dir`, slices made before (same images, code and libraries) are read from it, each
  entry checked first (read_cached_slice), and new or damaged ones written to it."""
  chosen = [(key, image_sources.decode_png(png), label)
            for key, png, label in corruptions.subsample(test_records, per_corruption)]
  slices = [(name, severity) for name in names for severity in corruptions.SEVERITIES]
  code = _code_fingerprint() if cache_dir else b""
  paths = {s: _slice_cache_path(cache_dir, code, chosen, *s) if cache_dir else None
           for s in slices}
  shape = (len(chosen),) + (chosen[0][1].shape if chosen else ())
  missing = [s for s in slices if not (cache_dir and cached_slice_is_whole(paths[s], shape))]
  log.info("Corrupted slices: %d of %d from the cache %s.", len(slices) - len(missing),
           len(slices), cache_dir or "(none)")

  def requests(slices_to_make):
    return [(image, name, severity, key) for name, severity in slices_to_make
            for key, image, _ in chosen]
  made = corruptions.corrupt_all(requests(missing), workers) if missing else iter(())
  for name, severity in slices:
    images = None if (name, severity) in missing else read_cached_slice(paths[(name, severity)],
                                                                       shape)
    if images is None:
      fresh = made if (name, severity) in missing else corruptions.corrupt_all(
          requests([(name, severity)]), workers)  # Damaged since the check above.
      images = [next(fresh) for _ in chosen]
      if cache_dir:
        try:
          write_cached_slice(paths[(name, severity)], np.stack(images))
        except OSError as error:  # A cache is an optimisation: a read-only home loses nothing.
          log.warning("Could not cache slice %s_%d in %s: %s", name, severity, cache_dir, error)
    for (key, _, label), image in zip(chosen, images):
      yield make_evaluation_example(key, image_sources.encode_png(image),
                                    label, CORRUPTED, name, severity)


def _cifar10_corrupted_config(name: str, severity: int) -> str:
  return f"cifar10_corrupted/{name}_{severity}"


def cifar10_corrupted(names: List[str], per_corruption: int,
                      data_dir: Optional[str]) -> Iterator[tf.train.Example]:
  """tensorflow-datasets' CIFAR-10-C, prepared already (write_evaluation_set): the first
  `per_corruption` images (all when 0) of each `<corruption>_<severity>` config; the same test
  images in every slice."""
  import tensorflow_datasets as tfds
  for name in names:
    for severity in corruptions.SEVERITIES:
      dataset = tfds.load(_cifar10_corrupted_config(name, severity), split="test",
                          data_dir=data_dir, shuffle_files=False, download=False)
      if per_corruption > 0:
        dataset = dataset.take(per_corruption)
      for index, record in enumerate(tfds.as_numpy(dataset)):
        yield make_evaluation_example(f"cifar10_corrupted-{index:05d}",
                                      image_sources.encode_png(record["image"]),
                                      int(record["label"]), CORRUPTED, name, severity)


def _write(uri: str, split: str, examples) -> int:
  path = os.path.join(uri, f"Split-{split}", _FILE_NAME)
  tf.io.gfile.makedirs(os.path.dirname(path))
  count = 0
  with tf.io.TFRecordWriter(path, options="GZIP") as writer:
    for example in examples:
      writer.write(example.SerializeToString())
      count += 1
  return count


def check_parameters(source: str, corruption_names: List[str]) -> None:
  if source not in SOURCES:
    raise ValueError(f"Unknown robustness source {source!r}; expected one of {SOURCES}.")
  unknown = [name for name in corruption_names if name not in corruptions.FAMILY_OF]
  if unknown:
    raise ValueError(f"Unknown corruption(s) {unknown} for source {source!r}; expected some "
                     f"of {list(corruptions.ALL_CORRUPTIONS)}.")
  missing = corruptions.unavailable(corruption_names) if source == "generated" else {}
  if missing:
    raise ValueError("Corruption(s) that cannot run on this machine: " + "; ".join(
        f"{name} {reason}" for name, reason in missing.items()) + ".")


def write_evaluation_set(examples_uri: str, input_splits: List[str], output_uri: str,
                         source: str, names: List[str], per_corruption: int,
                         tfds_data_dir: Optional[str] = None, workers: int = 0,
                         cache_dir: Optional[str] = None) -> Dict[str, int]:
  """Writes splits eval, test (empty when the input has none) and corrupted under output_uri;
  returns their example counts. Checks everything before writing anything. `workers`: processes
  that make the generated corruptions (0: as many as pay); `cache_dir`: where generated slices
  are cached (None: made afresh)."""
  check_parameters(source, names)
  if workers < 0:
    raise ValueError(f"workers must be >= 0 (0 = as many as pay), got {workers}.")
  if EVAL not in input_splits:
    raise ValueError(f"The examples at {examples_uri} have no '{EVAL}' split.")
  test_records = _read_split(examples_uri, TEST) if TEST in input_splits else []
  if names and source == "generated" and not test_records:
    raise ValueError(f"The generated robustness set corrupts the test split, and the examples "
                     f"at {examples_uri} have none; give a test split or set --corruptions=.")
  if source == "cifar10_corrupted":
    for name in names:
      for severity in corruptions.SEVERITIES:
        image_sources.prepare_tfds(_cifar10_corrupted_config(name, severity), tfds_data_dir)
  counts = {
      EVAL: _write(output_uri, EVAL, (make_evaluation_example(*r, EVAL)
                                      for r in _read_split(examples_uri, EVAL))),
      TEST: _write(output_uri, TEST, (make_evaluation_example(*r, TEST) for r in test_records)),
  }
  if source == "generated":
    corrupted = generated_corruptions(test_records, names, per_corruption, workers, cache_dir)
  else:
    corrupted = cifar10_corrupted(names, per_corruption, tfds_data_dir)
  counts[CORRUPTED] = _write(output_uri, CORRUPTED, corrupted)
  return counts


@component
def EvaluationSetGen(
    examples: InputArtifact[standard_artifacts.Examples],
    evaluation_set: OutputArtifact[standard_artifacts.Examples],
    source: Parameter[str],
    corruption_names: Parameter[str],
    examples_per_corruption: Parameter[int] = 0,
    tfds_data_dir: Parameter[str] = "",
    workers: Parameter[int] = 0,
    code_fingerprint: Parameter[str] = "",
) -> None:
  """Writes splits eval (clean), test (clean) and corrupted.

  corruption_names: comma-separated; empty for no robustness set.
  workers: processes making the generated corruptions; 0 = one per core when that pays.
  code_fingerprint: examples_code_fingerprint(), read by TFX's cache key alone.
  """
  names = [name for name in corruption_names.split(",") if name]
  counts = write_evaluation_set(
      examples.uri, artifact_utils.decode_split_names(examples.split_names), evaluation_set.uri,
      source, names, examples_per_corruption, tfds_data_dir or None, workers,
      corruption_cache_dir())
  evaluation_set.split_names = artifact_utils.encode_split_names([EVAL, TEST, CORRUPTED])
  log.info("Evaluation set: %s examples (corruptions: %s).",
           ", ".join(f"{n} {s}" for s, n in counts.items()), ", ".join(names) or "none")
