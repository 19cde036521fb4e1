"""The report's data: text only, tables whose rows fit their header, charts that are PNGs; what
does not fit is refused where the section builds it."""
import pytest

from reporting.document import BulletList, Chart, Code, Paragraph, Section, Strong, Table, inlines


def test_text_is_a_str_a_strong_or_code_or_a_tuple_of_them():
  assert inlines("a") == ("a",)
  assert inlines(("a", Strong("b"), Code("c"))) == ("a", Strong("b"), Code("c"))
  for wrong in (0.5, None, ["a"], Strong(1), ("a", 2)):
    with pytest.raises(TypeError, match="report text must be str, Strong or Code"):
      inlines(wrong)


def test_blocks_refuse_what_they_cannot_show():
  with pytest.raises(TypeError):
    Paragraph("accuracy ", 0.98)
  with pytest.raises(TypeError):
    BulletList([None])
  with pytest.raises(ValueError, match="table row 1 has 1 cells for 2 columns"):
    Table(["a", "b"], [("1", "2"), ("3",)])
  with pytest.raises(ValueError, match="chart 'c' is not a PNG"):
    Chart("c", b"<svg onload=alert(1)>")
  with pytest.raises(TypeError, match="a block must be a Paragraph, BulletList, Table or Chart"):
    Section("s", "<p>markup</p>")


def test_a_chart_is_a_data_uri_of_its_png():
  chart = Chart("c", b"\x89PNG\r\n\x1a\nrest")
  assert chart.data_uri == "data:image/png;base64,iVBORw0KGgpyZXN0"
