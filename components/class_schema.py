"""ClassSchemaGen: the curated schema plus the run's class names, so one schema artifact gives
the label domain, the model's output count and the served names (docs/pipeline.md).
"""
import json
import os

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import io_utils

from components import example_gen
from trainer_module.class_names import with_class_names

SCHEMA_FILE = "schema.pbtxt"  # As ImportSchemaGen names it: the Trainer reads the only file.


@component
def ClassSchemaGen(
    examples: InputArtifact[standard_artifacts.Examples],
    schema: OutputArtifact[standard_artifacts.Schema],
    schema_file: Parameter[str],
    class_names: Parameter[str] = "[]",
) -> None:
  """Writes schema_file's schema with the classes ExampleGen recorded, else `class_names`
  (a JSON list, in label order)."""
  names = example_gen.read_class_names(examples.uri) or json.loads(class_names)
  curated = io_utils.SchemaReader().read(schema_file)
  io_utils.write_pbtxt_file(os.path.join(schema.uri, SCHEMA_FILE),
                            with_class_names(curated, names))
