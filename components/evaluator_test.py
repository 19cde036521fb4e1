"""The Evaluator's input regrouping: every example once, batches of one schema, about the size
asked for."""
import apache_beam as beam
import pyarrow as pa
import pytest
import tensorflow_model_analysis as tfma
from apache_beam.testing.util import assert_that

from components import evaluator


def _batch(first: int, count: int, corrupted: bool) -> dict:
  columns = {"key": pa.array([[f"k{i}".encode()] for i in range(first, first + count)])}
  if corrupted:  # Corrupted examples carry a feature the clean ones lack.
    columns["corruption"] = pa.array([[b"fog"]] * count)
  return {tfma.ARROW_RECORD_BATCH_KEY: pa.RecordBatch.from_pydict(columns)}


def test_small_batches_are_regrouped_without_mixing_schemas_or_losing_examples():
  inputs = [_batch(0, 1, False), _batch(1, 2, False), _batch(3, 4, True), _batch(7, 1, True),
            _batch(8, 30, False)]

  def check(outputs):
    keys = sorted(k[0].decode() for o in outputs
                  for k in o[tfma.ARROW_RECORD_BATCH_KEY].column("key").to_pylist())
    assert keys == sorted(f"k{i}" for i in range(38))
    for o in outputs:
      batch = o[tfma.ARROW_RECORD_BATCH_KEY]
      corrupted = "corruption" in batch.schema.names
      assert all((int(k[0][1:]) in range(3, 8)) == corrupted
                 for k in batch.column("key").to_pylist())
    sizes = sorted(o[tfma.ARROW_RECORD_BATCH_KEY].num_rows for o in outputs)
    assert sizes[-1] == 30 and len(outputs) < len(inputs)  # Larger batches pass whole.

  with beam.Pipeline() as pipeline:
    regrouped = (pipeline | beam.Create(inputs, reshuffle=False)
                 | evaluator.regrouped_inputs(8).ptransform)
    assert_that(regrouped, check)


def test_extracts_other_than_one_record_batch_are_refused():
  with pytest.raises(ValueError, match="one record batch"):
    evaluator._concatenated([{tfma.ARROW_RECORD_BATCH_KEY: None, "features": {}}])
