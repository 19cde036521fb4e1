"""Class names in the schema: the label domain follows them, and they read back in order."""
import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from trainer_module import class_names

_CURATED = """
feature { name: "image" type: BYTES }
feature { name: "label" type: INT int_domain { min: 0 max: 9 } }
"""


def _schema():
  return text_format.Parse(_CURATED, schema_pb2.Schema())


def test_names_set_the_label_domain_and_read_back_in_label_order(tmp_path):
  named = class_names.with_class_names(_schema(), ["zebra", "ant", "cat"])
  label = next(f for f in named.feature if f.name == "label")
  assert (label.int_domain.min, label.int_domain.max) == (0, 2)
  assert class_names.class_names(named) == ("zebra", "ant", "cat")
  renamed = class_names.with_class_names(named, ["a", "b"])
  assert class_names.class_names(renamed) == ("a", "b") and len(renamed.string_domain) == 1
  path = tmp_path / "schema.pbtxt"
  path.write_text(text_format.MessageToString(renamed))
  assert class_names.read_class_names(str(path)) == ("a", "b")
  assert class_names.class_names(_schema()) is None


@pytest.mark.parametrize("names", [["one"], ["a", "a"], ["a", ""]])
def test_fewer_than_two_distinct_names_are_refused(names):
  with pytest.raises(ValueError, match="at least two distinct non-empty names"):
    class_names.with_class_names(_schema(), names)


def test_known_datasets_name_ten_classes():
  assert class_names.DIGITS == tuple("0123456789")
  assert len(class_names.CIFAR10) == 10 and class_names.CIFAR10[0] == "airplane"
  assert class_names.index_names(3) == ("0", "1", "2")


def test_a_schema_without_the_label_is_refused_naming_it():
  schema = text_format.Parse('feature { name: "image" type: BYTES }', schema_pb2.Schema())
  with pytest.raises(ValueError, match="^The schema has no 'label' feature to name the classes "
                     "of.$"):
    class_names.with_class_names(schema, ["a", "b"])
