"""The report as HTML and Markdown: every text it holds is shown as text. A report whose class
names, file names and pipeline name are hostile is opened in headless Chromium and parsed by
two Markdown renderers; nothing in either is markup that came from a name."""
import html.parser
import re

import markdown_it
import mistune
import numpy as np
import pytest

from components.calibration_metrics import ACCURACY_NAME, RELIABILITY_NAME
from reporting import render, sections
from reporting.document import (BulletList, Chart, Code, Paragraph, Report, Section, Strong,
                                Table)
from reporting.figures import CALIBRATED, EVAL, TEST, ReportSettings
from reporting.plots import bar_chart
from test_support import browser
from trainer_module.features import LABEL_KEY

HOSTILE = ("<img src=x onerror=alert(1)>", "<svg onload=alert(1)>", "[l](javascript:alert(2))",
           "back`tick", "line\n<script>alert(3)</script>", "pipe|split", "a$\\undefined$b",
           "**bold** _it_ ~~gone~~", "&lt;b&gt; &#60;i>", "http://example.com/x www.example.com",
           "who@example.com", "# heading", "- item", "1. item", "> quote", "    indented",
           "café 猫")
# What the report's own markup uses; anything else in the page came from a name.
PAGE_ELEMENTS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "ul", "li",
                 "strong", "code", "table", "thead", "tbody", "tr", "th", "td", "img"}


def _shown(text):
  """A text as a reader sees it: a line break is a space, runs of blanks are one."""
  return re.sub(r"\s+", " ", text).strip()


def _hostile_report():
  """The report's own sections, given hostile class names, file names, messages quoting them
  and a hostile pipeline name, model path and dataset."""
  class_names = list(HOSTILE)
  values = {}
  for k in range(len(class_names)):
    for slice_, accuracy in ((EVAL, 0.9), (TEST, 0.8)):
      values[slice_ + ((LABEL_KEY, k),)] = {("candidate", CALIBRATED, ACCURACY_NAME, False):
                                            accuracy}
  values[TEST] = {("candidate", CALIBRATED, RELIABILITY_NAME, False): np.array(
      [[3, 0.4, 0.3], [10, 0.9, 1.0]])}
  settings = ReportSettings(pipeline_name=HOSTILE[0], dataset=HOSTILE[2], model=HOSTILE[4],
                            num_classes=len(class_names), corruptions=(), bounds=())
  check = sections.ServedCheck(
      passed=False, split=HOSTILE[3], accuracy=None, correct=0, examples=0,
      evaluator_accuracy=None, tolerance=0.01,
      problems=tuple(f"class {name} was never predicted" for name in HOSTILE))
  skipped = [(f"/photos/{name}/{name}.jpg", f"cannot be decoded: {name}") for name in HOSTILE]
  return Report(f"Run report: {settings.pipeline_name}",
                BulletList([("dataset: ", Code(settings.dataset), f", model: {settings.model}"),
                            ("candidate model: ", Code(f"/models/{HOSTILE[5]}/{HOSTILE[3]}"))]),
                (sections.served_check_section(check),
                 sections.reliability_section(values),
                 sections.per_class_section(values, class_names),
                 sections.skipped_section(skipped)))


def test_a_report_of_hostile_names_shows_them_as_text_in_a_browser(tmp_path):
  page_path = tmp_path / "report.html"
  page_path.write_text(render.to_html(_hostile_report()))
  page = browser.open_page(str(page_path))
  assert page.dialogs == [] and page.handlers == [] and page.links == []
  assert set(page.elements) <= PAGE_ELEMENTS, set(page.elements) - PAGE_ELEMENTS
  assert page.elements.count("img") == 2  # The two charts, and nothing a name made.
  assert [(alt, loaded) for alt, loaded, _ in page.images] == [
      ("clean test, temperature-scaled", True), ("per-class accuracy", True)]
  assert page.requests == [] and page.outside_references == []
  shown = _shown(page.text)
  assert f"Run report: {HOSTILE[0]}" in shown
  for k, name in enumerate(HOSTILE):
    assert _shown(f"{name} ({k}) 0.9000 0.8000") in shown  # Its row of the per-class table.
    assert _shown(f"/photos/{name}/{name}.jpg cannot be decoded: {name}") in shown
    assert _shown(f"class {name} was never predicted") in shown


def test_the_browser_check_sees_markup_that_came_from_a_name(tmp_path):
  """The check above is not vacuous: names pasted into a page as the report once did are
  elements, handlers, links and scripts there."""
  page_path = tmp_path / "report.html"
  page_path.write_text("<html><body><table>" + "".join(
      f"<tr><td>{name}</td></tr>" for name in HOSTILE[:2]) + "</table><p><a href="
      "\"javascript:alert(2)\">l</a><br><script>alert(3)</script></p></body></html>")
  page = browser.open_page(str(page_path))
  assert sorted(page.dialogs) == ["1", "1", "3"]
  assert page.handlers == ["img onerror=alert(1)", "svg onload=alert(1)"]
  assert page.links == ["a javascript:alert(2)"]
  assert {"svg", "script", "a", "br"} <= set(page.elements)


def test_the_browser_check_sees_a_chart_that_points_outside_the_page(tmp_path):
  page_path = tmp_path / "report.html"
  page_path.write_text('<html><body><p><img alt="chart" src="http://example.com/chart.png">'
                       "</p></body></html>")
  page = browser.open_page(str(page_path))
  assert page.images == [("chart", False, "http://example.com/cha")]
  assert page.outside_references == ["http://example.com/chart.png"]


class _Markup(html.parser.HTMLParser):
  """The elements, attributes and table rows of an HTML fragment."""

  def __init__(self, text):
    super().__init__(convert_charrefs=True)
    self.tags, self.attributes, self.rows, self._cell = [], [], [], None
    self.feed(text)

  def handle_starttag(self, tag, attrs):
    self.tags.append(tag)
    self.attributes += [(tag, name, value) for name, value in attrs]
    if tag == "tr":
      self.rows.append([])
    elif tag in ("td", "th"):
      self._cell = []

  def handle_endtag(self, tag):
    if tag in ("td", "th"):
      self.rows[-1].append("".join(self._cell))
      self._cell = None

  def handle_data(self, data):
    if self._cell is not None:
      self._cell.append(data)


MARKDOWN_RENDERERS = {
    # CommonMark with GitHub's tables; raw HTML passed through, as a careless viewer would.
    "markdown-it": markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render,
    # Another parser, also linking bare URLs (GitHub's autolinks) and raw HTML kept.
    "mistune": mistune.create_markdown(escape=False,
                                       plugins=["table", "url", "strikethrough"]),
}


def _markdown_problems(markdown_text, class_names, skipped):
  """What a Markdown renderer made of the report that did not come from the report's own
  markup: elements other than its own, links, attributes other than a chart's; and per-class or
  skipped-files rows that do not hold exactly their name and figures."""
  problems = []
  for renderer_name, renderer in MARKDOWN_RENDERERS.items():
    markup = _Markup(renderer(markdown_text))
    unexpected = set(markup.tags) - PAGE_ELEMENTS
    if unexpected:
      problems.append(f"{renderer_name}: elements {sorted(unexpected)}")
    attributes = [(tag, name) for tag, name, value in markup.attributes
                  if not (tag == "img" and (name == "alt" or (
                      name == "src" and value.startswith("data:image/png;base64,"))))]
    if attributes:
      problems.append(f"{renderer_name}: attributes {attributes}")
    rows = [[_shown(cell) for cell in row] for row in markup.rows]
    for k, name in enumerate(class_names):
      if [_shown(f"{name} ({k})"), "0.9000", "0.8000"] not in rows:
        problems.append(f"{renderer_name}: no row of class {k}")
    for path, reason in skipped:
      if [_shown(path), _shown(reason)] not in rows:
        problems.append(f"{renderer_name}: no row of {path!r}")
    if len(rows) != 2 + len(class_names) + len(skipped):
      problems.append(f"{renderer_name}: {len(rows)} table rows")
  return problems


def test_a_report_of_hostile_names_shows_them_as_text_in_markdown():
  report = _hostile_report()
  skipped = [(f"/photos/{name}/{name}.jpg", f"cannot be decoded: {name}") for name in HOSTILE]
  assert _markdown_problems(render.to_markdown(report), HOSTILE, skipped) == []


def test_the_markdown_check_sees_names_pasted_into_markdown():
  """The check above is not vacuous: the same rows written as the report once wrote them are
  split, linked and made into elements."""
  skipped = [(f"/photos/{name}.jpg", "bad") for name in HOSTILE]
  pasted = "\n".join(["| class | eval | test |", "| --- | --- | --- |"] + [
      f"| {name} ({k}) | 0.9000 | 0.8000 |" for k, name in enumerate(HOSTILE)] + [
      "", "| path | reason |", "| --- | --- |"] + [
      f"| `{path}` | {reason} |" for path, reason in skipped])
  problems = "\n".join(_markdown_problems(pasted, HOSTILE, skipped))
  for sign in ("mistune: elements ['a', 'del', 'em', 'script', 'svg']",
               "markdown-it: attributes [('img', 'src'), ('img', 'onerror'), ('svg', 'onload')]",
               "markdown-it: no row of class 5",  # The pipe split it.
               "mistune: no row of '/photos/back`tick.jpg'", "markdown-it: 12 table rows"):
    assert sign in problems


@pytest.mark.parametrize("text, markdown", [
    ("a_b*c`d[e]f<g>h|i&j~k#l@m\\n", r"a\_b\*c\`d\[e\]f\<g\>h\|i\&j\~k\#l\@m\\n"),
    ("two\nlines\r\nthree\rfour", "two lines three four"),
    ("see http://x.org and www.y.org", r"see http\://x.org and www\.y.org"),
    ("0.9886 (sd 0.0020), +0.0040: T = 1.5", "0.9886 (sd 0.0020), +0.0040: T = 1.5"),
])
def test_markdown_escapes_what_could_start_markup_and_leaves_figures_alone(text, markdown):
  assert render.escape_markdown(text) == markdown


def _markdown_of(*blocks):
  return render.to_markdown(Report("t", BulletList([]), (Section("s", *blocks),)))


def test_a_block_that_would_open_a_list_heading_or_code_block_starts_with_an_escape():
  text = _markdown_of(Paragraph("- not a list"), Paragraph("12. not a list"),
                      Paragraph("    not code"), Paragraph("= not a heading rule"),
                      BulletList(["+ not nested", "3) not nested"]))
  assert "\n\\- not a list\n" in text and "\n12\\. not a list\n" in text
  assert "\nnot code\n" in text and "\n\\= not a heading rule\n" in text
  assert "\n- \\+ not nested\n- 3\\) not nested\n" in text


def test_code_is_a_code_span_unless_it_holds_what_a_span_cannot_and_strong_is_bold():
  text = _markdown_of(Paragraph(Code("a_b<c>"), " ", Code("a`b"), " ", Code("a|b"), " ",
                                Strong("ok "), "then"))
  assert "`a_b<c>` a\\`b a\\|b **ok** then" in text


def test_html_escapes_text_attributes_and_code():
  page = render.to_html(Report('"quoted" & <b>', BulletList([Code("<i>")]), (Section(
      "<h2>", Paragraph(Strong("<s>"), "a\"b"), Table(["<th>"], [["<td>"]]),
      Chart('" onerror="alert(1)', bar_chart(["x"], {"s": [0.5]}, "t", "y"))),)))
  assert "<title>&#34;quoted&#34; &amp; &lt;b&gt;</title>" in page
  assert "<li><code>&lt;i&gt;</code></li>" in page and "<h2>&lt;h2&gt;</h2>" in page
  assert "<p><strong>&lt;s&gt;</strong>a&#34;b</p>" in page
  assert "<th>&lt;th&gt;</th>" in page and "<td>&lt;td&gt;</td>" in page
  assert '<img alt="&#34; onerror=&#34;alert(1)" src="data:image/png;base64,' in page
