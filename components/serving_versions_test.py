"""Version names read by TF Serving's rule (safe_strto64), case by case."""
import pytest

from components import serving_versions


@pytest.mark.parametrize("name, version", [
    ("1", 1), ("0042", 42), (" 42", 42), ("42 ", 42), ("\t\n42\v\f\r", 42), ("-7", -7),
    ("0", 0), ("1234567890", 1234567890), ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
    ("9223372036854775808", None), ("99999999999999999999", None),
    ("-9223372036854775809", None), ("+42", None), ("- 42", None), ("4 2", None),
    ("", None), (" ", None), ("-", None), ("²", None), ("٤٢", None), ("42\u00a0", None),
    ("0x2a", None), ("42.0", None), ("1e3", None), (".incomplete-host-1-ab", None),
])
def test_names_parse_as_safe_strto64_does(name, version):
  assert serving_versions.parse_version(name) == version


def test_of_two_names_of_one_number_the_last_in_sorted_order_is_loaded(tmp_path):
  for name in ("0042", " 42", "42", "7", "007 ", "notes"):
    (tmp_path / name).mkdir()
  assert serving_versions.versions_by_number(str(tmp_path)) == {7: "7", 42: "42"}
  assert serving_versions.shadowed_names(str(tmp_path)) == {" 42": "42", "0042": "42",
                                                            "007 ": "7"}
  assert serving_versions.versions_by_number(str(tmp_path / "absent")) == {}


def test_a_file_in_place_of_the_base_directory_has_no_entries(tmp_path):
  (tmp_path / "serving").write_text("not a directory")
  assert serving_versions.entry_names(str(tmp_path / "serving")) == []


def test_an_object_stores_listing_is_read_as_entry_names(tmp_path, monkeypatch):
  """Object stores list a directory with a trailing '/' and may list the prefix itself as
  '/': the names are cut at the first '/', and the empty one dropped."""
  monkeypatch.setattr(serving_versions.fileio, "listdir",
                      lambda path: ["/", "7/", "42/", "notes.txt", "42/variables/variables.index"])
  assert serving_versions.entry_names(str(tmp_path)) == ["42", "7", "notes.txt"]
  assert serving_versions.versions_by_number(str(tmp_path)) == {7: "7", 42: "42"}
