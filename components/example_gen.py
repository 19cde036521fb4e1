"""ExampleGen for image sources that are not TFRecords (the embedded digits, tfds, an image
folder), query-based so the split rules are in MLMD and the cache key (docs/pipeline.md, "Data");
and the TFRecord ExampleGen. Both resolve a span pattern as TFX's file-based ExampleGen driver
does (components/spans.py; docs/pipeline.md, "New data every day"): the newest span, or the one
the run's `span` asks for, then its newest version, recorded on the Examples artifact.
"""
from __future__ import annotations

import concurrent.futures
import functools
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam
from tfx import types
from tfx.components.example_gen import (base_example_gen_executor, driver, input_processor,
                                        utils as example_gen_utils)
from tfx.components.example_gen.component import QueryBasedExampleGen
from tfx.components.example_gen.import_example_gen import executor as import_executor
from tfx.components.example_gen.import_example_gen.component import ImportExampleGen
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import proto_utils

from components import image_folder, image_sources, spans
from components.splits import SPLITS
SOURCES = ("digits", "cifar10", "image_dir")
CLASS_NAMES_FILE = "class_names.json"  # {"class_names": [...]}, in label order.
SKIPPED_FILES_FILE = "skipped_images.json"  # [[path, reason], ...]: left out, and why.
_BAD_FILES_DIR = "bad_files"  # Beam's list of unreadable images, until Do has read it.
MAX_NAMED_BAD_FILES = 50  # In the error; SKIPPED_FILES_FILE lists them all.
# The span a run asks for ("" = the newest): an execution property, so that on Kubeflow it is
# the runtime parameter `span` (not TFX's own `span`, which the driver sets to the span read).
REQUESTED_SPAN_KEY = "requested_span"
# On the Examples artifact of a span pattern: JSON [{"span", "version", "folder",
# "train_examples"}, ...], newest first: the spans whose train splits the train split holds.
TRAIN_WINDOW_PROPERTY = "train_window"
READ_THREADS = 16  # Image files a Beam worker reads at once.
_SPANS = "spans"  # In a resolved query: the window's spans, newest first (Span.to_json).


def source_query(source: str, split: str, eval_fraction: float, test_fraction: float,
                 tfds_data_dir: Optional[str] = None, image_dir: Optional[str] = None,
                 skip_bad_images: bool = False, train_spans: int = 1) -> str:
  spec = {"source": source, "split": split, "eval_fraction": eval_fraction,
          "test_fraction": test_fraction, "tfds_data_dir": tfds_data_dir}
  if source == "image_dir":
    spec.update(image_dir=image_dir, skip_bad_images=skip_bad_images)
    if spans.is_pattern(image_dir):
      spec.update(train_spans=train_spans)
  return json.dumps(spec, sort_keys=True)


def records_for_query(query: str):
  """The (key, png, label) records one split's query asks for (digits and tfds)."""
  spec = json.loads(query)
  if spec["source"] == "digits":
    return image_sources.digits_records(spec["split"], spec["eval_fraction"],
                                        spec["test_fraction"])
  if spec["source"] == "cifar10":
    return image_sources.tfds_records(spec["source"], spec["split"], spec["eval_fraction"],
                                      spec["tfds_data_dir"])
  raise ValueError(f"Unknown image source {spec['source']!r} in query {query}.")


def _record_only(result):
  return [result[0]] if result[0] else []


def _read_listed(folder: str, key: str, label: int, shown_key: str):
  """read_image of `key` under `folder`, its record keyed `shown_key` (the key with its span
  folder in front, when the source is a span pattern)."""
  record, bad = image_folder.read_image(folder, key, label)
  return ((shown_key,) + record[1:] if record else None), bad


def _read_batch(listed_files: List[tuple]) -> List[tuple]:
  """_read_listed of each (folder, key, label, shown key), READ_THREADS at a time: a read from
  an object store mostly waits for its answer (tens of milliseconds), which threads share."""
  with concurrent.futures.ThreadPoolExecutor(READ_THREADS) as pool:
    return list(pool.map(lambda listed: _read_listed(*listed), listed_files))


def _bad_file_line(result):
  return [json.dumps(result[1])] if result[1] else []


def _write_lines(lines: List[str], path: str) -> None:
  """One file of `lines`, empty when there are none, written with TFX's fileio: Beam's own
  text sink would write an empty file to s3:// as a multipart upload of no parts, which S3
  refuses (MalformedXML; apache_beam/io/aws/s3io.py, S3Uploader.finish)."""
  from tfx.dsl.io import fileio
  fileio.makedirs(os.path.dirname(path))
  with fileio.open(path, "w") as f:
    f.write("".join(line + "\n" for line in sorted(lines)))


@beam.ptransform_fn
def _ImageSourceToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                           split_pattern: str,
                           listed: Optional[Dict[str, List[tuple]]] = None,
                           bad_files_dir: Optional[str] = None) -> beam.pvalue.PCollection:
  """One split's examples. An image folder's files are listed already (`listed`: per split,
  (folder, key, label, shown key)); the ones that are not usable images go to
  `bad_files_dir`/<split> as JSON lines."""
  del exec_properties  # Everything is in the split's query.
  spec = json.loads(split_pattern)
  if spec["source"] == "image_dir":
    read = (pipeline
            | "Files" >> beam.Create(listed[spec["split"]])
            | "Spread" >> beam.Reshuffle()
            | "Batch" >> beam.BatchElements(max_batch_size=4 * READ_THREADS)
            | "Read" >> beam.FlatMap(_read_batch))
    _ = (read
         | "BadFiles" >> beam.FlatMap(_bad_file_line)
         | "AllBadFiles" >> beam.combiners.ToList()
         | "WriteBadFiles" >> beam.Map(_write_lines, os.path.join(bad_files_dir, spec["split"])))
    records = read | "Records" >> beam.FlatMap(_record_only)
  else:
    records = (pipeline
               | "Query" >> beam.Create([split_pattern])
               | "Read" >> beam.FlatMap(records_for_query)
               | "Spread" >> beam.Reshuffle())
  return records | "ToExample" >> beam.MapTuple(image_sources.make_example)


def _first_query(exec_properties: Dict[str, Any]) -> dict:
  input_config = example_gen_pb2.Input()
  proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
                            input_config)
  return json.loads(input_config.splits[0].pattern)


def _read_bad_files(bad_files_dir: str) -> Dict[str, List[image_folder.BadFile]]:
  """{split: the bad files Beam wrote for it}."""
  import tensorflow as tf
  found = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(bad_files_dir, "*"))):
    with tf.io.gfile.GFile(path) as f:
      found[os.path.basename(path)] = [tuple(json.loads(line)) for line in f if line.strip()]
  tf.io.gfile.rmtree(bad_files_dir)
  return found


def _window_of(spec: dict, exec_properties: Dict[str, Any]) -> List[spans.Span]:
  """The spans an image folder's query reads, newest first: those its driver resolved, or,
  when no driver ran (Vertex runs none for this ExampleGen), resolved here the same way; []
  for a plain folder."""
  if _SPANS in spec:
    return [spans.Span.from_json(value) for value in spec[_SPANS]]
  if not spans.is_pattern(spec["image_dir"]):
    return []
  newest = spans.resolve(spec["image_dir"], exec_properties.get(REQUESTED_SPAN_KEY) or "")
  return spans.window(spec["image_dir"], newest, spec.get("train_spans", 1))


def _list_window(spec: dict, window: List[spans.Span]):
  """(the newest span's layout, {split: [(folder, key, label, shown key)]}, the problems, and
  per span its train files): the newest span's splits, and the older spans' train splits with
  their labels by class name. A class an older span has and the newest lacks is refused."""
  pattern = spec["image_dir"]
  folders = [span.folder for span in window] or [pattern]
  layouts = [image_folder.scan(folder, spec["eval_fraction"], spec["test_fraction"])
             for folder in folders]
  newest = layouts[0]
  label = {name: index for index, name in enumerate(newest.class_names)}
  listed = {split: [] for split in SPLITS}
  problems, train_counts = [], []
  for index, layout in enumerate(layouts):
    prefix = spans.key_prefix(pattern, window[index]) + "/" if window else ""
    unknown = [name for name in layout.class_names if name not in label]
    if unknown:
      raise image_folder.ImageFolderError(
          f"image_dir {pattern}: span folder {layout.image_dir} has class folder(s) "
          f"{unknown} that the newest span {newest.image_dir} lacks; the window's train splits "
          "need the newest span's classes (rename or remove them, or lower --train_spans)")
    problems += layout.problems
    for split in (SPLITS if index == 0 else ("train",)):
      listed[split] += [(layout.image_dir, key, label[layout.class_names[file_label]],
                         prefix + key) for key, file_label in layout.files[split]]
    train_counts.append(len(layout.files["train"]))
  return newest, listed, problems, train_counts


def _write_json(path: str, value) -> None:
  import tensorflow as tf
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(value, f, indent=1)


class _Executor(base_example_gen_executor.BaseExampleGenExecutor):

  _image_folder_transform = None  # Do binds an image folder's listing to the transform.

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    return self._image_folder_transform or _ImageSourceToExamples

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    """Prepares a tfds dataset or lists an image folder first; after the splits are written,
    fails naming the folder's bad files (unless the query skips them), and records its class
    names and the skipped files."""
    examples = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EXAMPLES_KEY])
    spec = _first_query(exec_properties)
    if spec["source"] == "cifar10":
      image_sources.prepare_tfds(spec["source"], spec["tfds_data_dir"])
    layout = None
    if spec["source"] == "image_dir":
      window = _window_of(spec, exec_properties)
      layout, listed, problems, train_counts = _list_window(spec, window)
      bad_files_dir = os.path.join(examples.uri, _BAD_FILES_DIR)
      self._image_folder_transform = functools.partial(
          _ImageSourceToExamples, listed=listed, bad_files_dir=bad_files_dir)
    super().Do(input_dict, output_dict, exec_properties)
    if layout is None:
      return
    bad = _read_bad_files(bad_files_dir)
    skipped = sorted(problems + [item for found in bad.values() for item in found])
    if skipped and not spec["skip_bad_images"]:
      more = len(skipped) - MAX_NAMED_BAD_FILES
      raise image_folder.ImageFolderError(
          f"{len(skipped)} bad file(s) or folder(s) in image_dir {spec['image_dir']}; fix or "
          "remove them, or pass --skip_bad_images=true to leave them out (the run report lists "
          "them):\n" + image_folder.describe(skipped[:MAX_NAMED_BAD_FILES]) +
          (f"\n  ... and {more} more" if more > 0 else ""))
    _write_json(os.path.join(examples.uri, CLASS_NAMES_FILE),
                {"class_names": list(layout.class_names)})
    _write_json(os.path.join(examples.uri, SKIPPED_FILES_FILE), [list(s) for s in skipped])
    if window:
      _record_window(examples, window, train_counts, bad.get("train", []))


def _record_window(examples, window: List[spans.Span], listed_train: List[int],
                   bad_train: List[image_folder.BadFile]) -> None:
  """The span and version read (as TFX's driver records them; again here for a run without
  a driver), and the train window with each span's train examples."""
  examples.set_int_custom_property(example_gen_utils.SPAN_PROPERTY_NAME, window[0].number)
  if window[0].version is not None:
    examples.set_int_custom_property(example_gen_utils.VERSION_PROPERTY_NAME,
                                     window[0].version)
  entries = []
  for span, listed in zip(window, listed_train):
    folder = span.folder.rstrip("/") + "/"
    entries.append({"span": span.number, "version": span.version, "folder": span.folder,
                    "train_examples": listed - sum(path.startswith(folder)
                                                   for path, _ in bad_train)})
  examples.set_string_custom_property(TRAIN_WINDOW_PROPERTY, json.dumps(entries))


# The TFRecord ExampleGen's window: the span folder pattern below input_base ({SPAN}, for a
# tfrecord_dir gs://b/records/{SPAN}), and how many spans' train splits the train split holds.
SPAN_PATTERN_KEY = "span_pattern"
TRAIN_SPANS_KEY = "train_spans"
_COUNTS_DIR = "train_counts"  # Beam's count of each span's train records, until Do reads it.


def _with_key_prefix(example, prefix: str):
  """An older span's example, its key prefixed by its span folder (keys stay unique)."""
  from trainer_module.features import EXAMPLE_KEY
  example = type(example).FromString(example.SerializeToString())
  key = example.features.feature[EXAMPLE_KEY].bytes_list.value
  key[:] = [prefix.encode() + b"/" + (key[0] if key else b"")]
  return example


@beam.ptransform_fn
def _TFRecordWindow(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                    split_pattern: str, read_split, train_pattern: str,
                    older: List[Tuple[str, str]], counts_dir: str) -> beam.pvalue.PCollection:
  """A split as ImportExampleGen reads it; the train split with the older spans' train
  records (`older`: (folder, key prefix)), each span's count written to `counts_dir`."""
  records = pipeline | "Newest" >> read_split(exec_properties, split_pattern)
  if split_pattern != train_pattern:
    return records
  parts = [records]
  for index, (folder, prefix) in enumerate(older):
    parts.append(pipeline
                 | f"Read{index}" >> beam.io.ReadFromTFRecord(
                     os.path.join(folder, os.path.basename(os.path.dirname(train_pattern)),
                                  os.path.basename(train_pattern)))
                 | f"Parse{index}" >> beam.Map(tf_example_from_string)
                 | f"Key{index}" >> beam.Map(_with_key_prefix, prefix))
  for index, part in enumerate(parts):
    _ = (part
         | f"Count{index}" >> beam.combiners.Count.Globally()
         | f"WriteCount{index}" >> beam.io.WriteToText(os.path.join(counts_dir, str(index)),
                                                       shard_name_template=""))
  return parts | "Window" >> beam.Flatten()


def tf_example_from_string(record: bytes):
  import tensorflow as tf
  return tf.train.Example.FromString(record)


class _TFRecordExecutor(import_executor.Executor):
  """ImportExampleGen's executor; with train_spans > 1 the train split also holds the train
  splits of the older spans of the window (TFX's RangeConfig reads one span)."""

  _window_transform = None

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    read_split = super().GetInputSourceToExamplePTransform()
    if self._window_transform is None:
      return read_split
    return functools.partial(self._window_transform, read_split=read_split)

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    count = int(exec_properties.get(TRAIN_SPANS_KEY) or 1)
    relative = exec_properties.get(SPAN_PATTERN_KEY) or ""
    if count <= 1 or not spans.is_pattern(relative):
      return super().Do(input_dict, output_dict, exec_properties)
    examples = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EXAMPLES_KEY])
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
                              input_config)
    train_pattern = next(s.pattern for s in input_config.splits if s.name == "train")
    base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    pattern = os.path.join(base, relative)
    newest_folder = os.path.join(base, os.path.dirname(os.path.dirname(train_pattern)))
    version = exec_properties.get(example_gen_utils.VERSION_PROPERTY_NAME)
    newest = spans.Span(int(exec_properties[example_gen_utils.SPAN_PROPERTY_NAME]),
                        None if version is None else int(version), newest_folder)
    window = spans.window(pattern, newest, count)
    counts_dir = os.path.join(examples.uri, _COUNTS_DIR)
    self._window_transform = functools.partial(
        _TFRecordWindow, train_pattern=train_pattern, counts_dir=counts_dir,
        older=[(s.folder, spans.key_prefix(pattern, s)) for s in window[1:]])
    super().Do(input_dict, output_dict, exec_properties)
    counts = _read_counts(counts_dir, len(window))
    examples.set_string_custom_property(TRAIN_WINDOW_PROPERTY, json.dumps([
        {"span": s.number, "version": s.version, "folder": s.folder, "train_examples": n}
        for s, n in zip(window, counts)]))


def _read_counts(counts_dir: str, spans_read: int) -> List[int]:
  import tensorflow as tf
  counts = []
  for index in range(spans_read):
    with tf.io.gfile.GFile(os.path.join(counts_dir, str(index))) as f:
      counts.append(int(f.read().strip() or 0))
  tf.io.gfile.rmtree(counts_dir)
  return counts


def read_train_window(examples) -> List[dict]:
  """The train window an Examples artifact records (TRAIN_WINDOW_PROPERTY), or []."""
  if not examples.has_custom_property(TRAIN_WINDOW_PROPERTY):
    return []
  return json.loads(examples.get_string_custom_property(TRAIN_WINDOW_PROPERTY))


class _ImageFolderInputProcessor(input_processor.QueryBasedInputProcessor):
  """An image folder's span pattern resolved as TFX's FileBasedInputProcessor resolves one (the
  newest or the requested span, then its newest version), with the window of older spans;
  the fingerprint covers every folder read."""

  def __init__(self, splits, requested_span: str = ""):
    super().__init__(splits, None)
    self._spec = json.loads(list(splits)[0].pattern)
    self._requested = requested_span
    self._window: List[spans.Span] = []

  def _is_pattern(self) -> bool:
    return self._spec["source"] == "image_dir" and spans.is_pattern(self._spec["image_dir"])

  def resolve_span_and_version(self):
    if not self._is_pattern():
      return super().resolve_span_and_version()
    pattern = self._spec["image_dir"]
    newest = spans.resolve(pattern, self._requested)
    self._window = spans.window(pattern, newest, self._spec.get("train_spans", 1))
    return newest.number, newest.version

  def get_pattern_for_span_version(self, pattern, span, version) -> str:
    if not self._window:
      return super().get_pattern_for_span_version(pattern, span, version)
    spec = json.loads(pattern)
    spec[_SPANS] = [s.to_json() for s in self._window]
    return json.dumps(spec, sort_keys=True)

  def get_input_fingerprint(self, span, version) -> Optional[str]:
    if self._spec["source"] != "image_dir":
      return None
    if not self._window:
      return image_folder.listing_fingerprint(self._spec["image_dir"])
    return "\n".join(f"{s.folder}: {image_folder.listing_fingerprint(s.folder)}"
                     for s in self._window)


class _Driver(driver.QueryBasedDriver):
  """Resolves an image folder's span pattern and fingerprints the folders' listing, so the
  cache key changes with the folders (as TFX's file-based ExampleGen driver does)."""

  _requested_span = ""

  def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
    self._requested_span = exec_properties.get(REQUESTED_SPAN_KEY) or ""
    return super().resolve_exec_properties(exec_properties, pipeline_info, component_info)

  def get_input_processor(self, splits, range_config=None, input_base_uri=None):
    return _ImageFolderInputProcessor(splits, self._requested_span)


class _FileDriver(driver.FileBasedDriver):
  """TFX's file-based driver, with the span the run asks for as TFX's own static range, and a
  missing or empty span named with the pattern and its folder before TFX looks."""

  def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
                              input_config)
    # Each split's pattern is <span folder pattern>/<split>/*.
    relative = os.path.dirname(os.path.dirname(input_config.splits[0].pattern))
    pattern = os.path.join(exec_properties[standard_component_specs.INPUT_BASE_KEY], relative)
    if spans.is_pattern(relative):
      requested = exec_properties.get(REQUESTED_SPAN_KEY) or ""
      spans.resolve(pattern, requested)
      number = spans.requested_span(pattern, requested)
      if number is not None:
        exec_properties[standard_component_specs.RANGE_CONFIG_KEY] = proto_utils.proto_to_json(
            range_config_pb2.RangeConfig(static_range=range_config_pb2.StaticRange(
                start_span_number=number, end_span_number=number)))
    resolved = super().resolve_exec_properties(exec_properties, pipeline_info, component_info)
    count = int(resolved.get(TRAIN_SPANS_KEY) or 1)
    if spans.is_pattern(relative) and count > 1:
      # The older spans' train files are read too: their fingerprint joins TFX's.
      from tfx.utils import io_utils
      newest = spans.Span(int(resolved[example_gen_utils.SPAN_PROPERTY_NAME]), None, "")
      resolved[example_gen_utils.FINGERPRINT_PROPERTY_NAME] = "\n".join(
          [resolved[example_gen_utils.FINGERPRINT_PROPERTY_NAME]] +
          [io_utils.generate_fingerprint(f"train of {s.folder}",
                                         os.path.join(s.folder, "train", "*"))
           for s in spans.window(pattern, newest, count)[1:]])
    return resolved


def driver_for(exec_properties: Dict[str, Any]):
  """The driver class of this module's ExampleGen whose execution properties these are (the
  TFRecord one has an input base)."""
  return _FileDriver if exec_properties.get(standard_component_specs.INPUT_BASE_KEY) else _Driver


def read_class_names(examples_uri: str) -> Optional[List[str]]:
  """The class names an image folder's ExampleGen recorded, or None (another source)."""
  import tensorflow as tf
  path = os.path.join(examples_uri, CLASS_NAMES_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.load(f)["class_names"]


def read_skipped_files(examples_uri: str) -> List[image_folder.BadFile]:
  """The bad files an image folder's ExampleGen left out (skip_bad_images), or []."""
  import tensorflow as tf
  path = os.path.join(examples_uri, SKIPPED_FILES_FILE)
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path) as f:
    return [tuple(item) for item in json.load(f)]


_REQUESTED_SPAN = {REQUESTED_SPAN_KEY: ExecutionParameter(type=str, optional=True)}


class _ImageDatasetSpec(standard_component_specs.QueryBasedExampleGenSpec):
  PARAMETERS = {**standard_component_specs.QueryBasedExampleGenSpec.PARAMETERS,
                **_REQUESTED_SPAN}


class _TFRecordSpec(standard_component_specs.FileBasedExampleGenSpec):
  PARAMETERS = {**standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
                **_REQUESTED_SPAN,
                SPAN_PATTERN_KEY: ExecutionParameter(type=str, optional=True),
                TRAIN_SPANS_KEY: ExecutionParameter(type=int, optional=True)}


def _spec(spec_class, input_config: example_gen_pb2.Input, span, **more):
  return spec_class(input_config=input_config,
                    output_config=example_gen_utils.make_default_output_config(input_config),
                    output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
                    output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
                    examples=types.Channel(type=standard_artifacts.Examples),
                    **{REQUESTED_SPAN_KEY: span}, **more)


class ImageDatasetExampleGen(QueryBasedExampleGen):
  """Emits train, eval and test splits of `source` as tf.Examples (image, label, key). An
  image folder may be a span pattern: `span` ("" = the newest; a runtime parameter on
  Kubeflow) picks the span, and the train split holds the train splits of the newest
  `train_spans` spans up to it."""

  SPEC_CLASS = _ImageDatasetSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(_Executor)
  DRIVER_CLASS = _Driver

  def __init__(self, source: str, eval_fraction: float, test_fraction: float,
               tfds_data_dir: Optional[str] = None, image_dir: Optional[str] = None,
               skip_bad_images: bool = False, span: Any = "", train_spans: int = 1):
    if source not in SOURCES:
      raise ValueError(f"Unknown image source {source!r}; expected one of {SOURCES}.")
    splits = [
        example_gen_pb2.Input.Split(
            name=split,
            pattern=source_query(source, split, eval_fraction, test_fraction, tfds_data_dir,
                                 image_dir, skip_bad_images, train_spans))
        for split in SPLITS
    ]
    base_beam_component.BaseBeamComponent.__init__(self, spec=_spec(
        _ImageDatasetSpec, example_gen_pb2.Input(splits=splits), span))


class TFRecordExampleGen(ImportExampleGen):
  """TFX's ImportExampleGen (its executor, and its file-based driver, which Kubeflow runs
  before the executor), with the span a run asks for (`span`, "" = the newest) when the
  split patterns (<span_pattern>/<split>/*) hold a span pattern, and the train splits of the
  newest `train_spans` spans up to it."""

  SPEC_CLASS = _TFRecordSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(_TFRecordExecutor)
  DRIVER_CLASS = _FileDriver

  def __init__(self, input_base: Any, input_config: example_gen_pb2.Input, span: Any = "",
               span_pattern: str = "", train_spans: int = 1):
    base_beam_component.BaseBeamComponent.__init__(self, spec=_spec(
        _TFRecordSpec, input_config, span, input_base=input_base,
        **{SPAN_PATTERN_KEY: span_pattern, TRAIN_SPANS_KEY: train_spans}))
