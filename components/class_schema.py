"""ClassSchemaGen: the curated schema, with the run's class names and the label domain they give.

It replaces ImportSchemaGen: the same curated file (components/schema.pbtxt), plus the classes
(trainer_module/class_names.py), so that the one schema artifact ExampleValidator checks the
labels against also tells the Trainer how many outputs the model has and what the served model
names them. An image folder's names come from its ExampleGen's output (components/
example_gen.py); the other datasets' are known before the run (`class_names`:
PipelineConfig.declared_class_names).
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
