"""ExampleGen for image sources that are not TFRecords (the embedded digits, tfds, an image
folder), query-based so the split rules are in MLMD and the cache key (docs/pipeline.md, "Data").
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Dict, List, Optional

import apache_beam as beam
from tfx.components.example_gen import base_example_gen_executor, driver, input_processor
from tfx.components.example_gen.component import QueryBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components import image_folder, image_sources
SOURCES = ("digits", "cifar10", "image_dir")
CLASS_NAMES_FILE = "class_names.json"  # {"class_names": [...]}, in label order.
SKIPPED_FILES_FILE = "skipped_images.json"  # [[path, reason], ...]: left out, and why.
_BAD_FILES_DIR = "bad_files"  # Beam's list of unreadable images, until Do has read it.
MAX_NAMED_BAD_FILES = 50  # In the error; SKIPPED_FILES_FILE lists them all.


def source_query(source: str, split: str, eval_fraction: float, test_fraction: float,
                 tfds_data_dir: Optional[str] = None, image_dir: Optional[str] = None,
                 skip_bad_images: bool = False) -> str:
  spec = {"source": source, "split": split, "eval_fraction": eval_fraction,
          "test_fraction": test_fraction, "tfds_data_dir": tfds_data_dir}
  if source == "image_dir":
    spec.update(image_dir=image_dir, skip_bad_images=skip_bad_images)
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


def _bad_file_line(result):
  return [json.dumps(result[1])] if result[1] else []


@beam.ptransform_fn
def _ImageSourceToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                           split_pattern: str,
                           layout: Optional[image_folder.FolderLayout] = None,
                           bad_files_dir: Optional[str] = None) -> beam.pvalue.PCollection:
  """One split's examples. An image folder's files are listed already (`layout`); the ones
  that are not usable images go to `bad_files_dir`/<split> as JSON lines."""
  del exec_properties  # Everything is in the split's query.
  spec = json.loads(split_pattern)
  if spec["source"] == "image_dir":
    read = (pipeline
            | "Files" >> beam.Create(layout.files[spec["split"]])
            | "Spread" >> beam.Reshuffle()
            | "Read" >> beam.MapTuple(functools.partial(image_folder.read_image,
                                                        layout.image_dir)))
    _ = (read
         | "BadFiles" >> beam.FlatMap(_bad_file_line)
         | "WriteBadFiles" >> beam.io.WriteToText(os.path.join(bad_files_dir, spec["split"]),
                                                  shard_name_template=""))
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


def _read_bad_files(bad_files_dir: str) -> List[image_folder.BadFile]:
  import tensorflow as tf
  found = []
  for path in sorted(tf.io.gfile.glob(os.path.join(bad_files_dir, "*"))):
    with tf.io.gfile.GFile(path) as f:
      found += [tuple(json.loads(line)) for line in f if line.strip()]
  tf.io.gfile.rmtree(bad_files_dir)
  return found


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
      layout = image_folder.scan(spec["image_dir"], spec["eval_fraction"],
                                 spec["test_fraction"])
      bad_files_dir = os.path.join(examples.uri, _BAD_FILES_DIR)
      self._image_folder_transform = functools.partial(
          _ImageSourceToExamples, layout=layout, bad_files_dir=bad_files_dir)
    super().Do(input_dict, output_dict, exec_properties)
    if layout is None:
      return
    skipped = sorted(layout.problems + _read_bad_files(bad_files_dir))
    if skipped and not spec["skip_bad_images"]:
      more = len(skipped) - MAX_NAMED_BAD_FILES
      raise image_folder.ImageFolderError(
          f"{len(skipped)} bad file(s) or folder(s) in image_dir {layout.image_dir}; fix or "
          "remove them, or pass --skip_bad_images=true to leave them out (the run report lists "
          "them):\n" + image_folder.describe(skipped[:MAX_NAMED_BAD_FILES]) +
          (f"\n  ... and {more} more" if more > 0 else ""))
    _write_json(os.path.join(examples.uri, CLASS_NAMES_FILE),
                {"class_names": list(layout.class_names)})
    _write_json(os.path.join(examples.uri, SKIPPED_FILES_FILE), [list(s) for s in skipped])


class _ImageFolderInputProcessor(input_processor.QueryBasedInputProcessor):

  def get_input_fingerprint(self, span, version) -> Optional[str]:
    spec = json.loads(self._splits[0].pattern)
    if spec["source"] != "image_dir":
      return None
    return image_folder.listing_fingerprint(spec["image_dir"])


class _Driver(driver.QueryBasedDriver):
  """Fingerprints an image folder's listing, so the cache key changes with the folder."""

  def get_input_processor(self, splits, range_config=None, input_base_uri=None):
    return _ImageFolderInputProcessor(splits, range_config)


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


class ImageDatasetExampleGen(QueryBasedExampleGen):
  """Emits train, eval and test splits of `source` as tf.Examples (image, label, key)."""

  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(_Executor)
  DRIVER_CLASS = _Driver

  def __init__(self, source: str, eval_fraction: float, test_fraction: float,
               tfds_data_dir: Optional[str] = None, image_dir: Optional[str] = None,
               skip_bad_images: bool = False):
    if source not in SOURCES:
      raise ValueError(f"Unknown image source {source!r}; expected one of {SOURCES}.")
    splits = [
        example_gen_pb2.Input.Split(
            name=split,
            pattern=source_query(source, split, eval_fraction, test_fraction, tfds_data_dir,
                                 image_dir, skip_bad_images))
        for split in image_sources.SPLITS
    ]
    super().__init__(input_config=example_gen_pb2.Input(splits=splits))
