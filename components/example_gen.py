"""ExampleGen for image datasets that are not files yet: the embedded digits and tfds datasets.

Like BigQueryExampleGen, it is a query-based ExampleGen: each output split has a "query", here
a JSON description of the source and split, so the split rules are recorded in MLMD and in the
component's cache key.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Optional

import apache_beam as beam
from tfx.components.example_gen import base_example_gen_executor
from tfx.components.example_gen.component import QueryBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from components import image_sources

SOURCES = ("digits", "cifar10")


def source_query(source: str, split: str, eval_fraction: float, test_fraction: float,
                 tfds_data_dir: Optional[str]) -> str:
  return json.dumps({"source": source, "split": split, "eval_fraction": eval_fraction,
                     "test_fraction": test_fraction, "tfds_data_dir": tfds_data_dir},
                    sort_keys=True)


def records_for_query(query: str):
  """The (key, png, label) records one split's query asks for."""
  spec = json.loads(query)
  if spec["source"] == "digits":
    return image_sources.digits_records(spec["split"], spec["eval_fraction"],
                                        spec["test_fraction"])
  if spec["source"] in SOURCES:
    return image_sources.tfds_records(spec["source"], spec["split"], spec["eval_fraction"],
                                      spec["tfds_data_dir"])
  raise ValueError(f"Unknown image source {spec['source']!r} in query {query}.")


@beam.ptransform_fn
def _ImageSourceToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                           split_pattern: str) -> beam.pvalue.PCollection:
  del exec_properties  # Everything is in the split's query.
  return (pipeline
          | "Query" >> beam.Create([split_pattern])
          | "Read" >> beam.FlatMap(records_for_query)
          | "Spread" >> beam.Reshuffle()
          | "ToExample" >> beam.MapTuple(image_sources.make_example))


class _Executor(base_example_gen_executor.BaseExampleGenExecutor):

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    return _ImageSourceToExamples


class ImageDatasetExampleGen(QueryBasedExampleGen):
  """Emits train, eval and test splits of `source` as tf.Examples (image, label, key)."""

  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(_Executor)

  def __init__(self, source: str, eval_fraction: float, test_fraction: float,
               tfds_data_dir: Optional[str] = None):
    if source not in SOURCES:
      raise ValueError(f"Unknown image source {source!r}; expected one of {SOURCES}.")
    splits = [
        example_gen_pb2.Input.Split(
            name=split,
            pattern=source_query(source, split, eval_fraction, test_fraction, tfds_data_dir))
        for split in image_sources.SPLITS
    ]
    super().__init__(input_config=example_gen_pb2.Input(splits=splits))
