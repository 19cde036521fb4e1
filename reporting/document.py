"""The run report as data: a title, a few lines about the run, and sections of paragraphs,
tables, lists and charts, each holding plain strings. reporting/render.py writes it as HTML
(a Jinja2 template that escapes every value) and as Markdown (every text escaped), so no string
a section holds is ever markup: a class named `<img src=x onerror=...>` or a file named
`[l](javascript:...)` shows as those characters, never as a tag, a link or a table row.

Inline text is a `str`, a `Strong` or a `Code` (a name, path or value shown as code), or a
tuple of them for text that mixes them; a table cell and a list item are inline text. How to
add a section: reporting/sections.py.
"""
from __future__ import annotations

import base64
import dataclasses
from typing import ClassVar, Sequence, Tuple, Union


@dataclasses.dataclass(frozen=True)
class Strong:
  """Text shown in bold."""
  text: str
  kind: ClassVar[str] = "strong"


@dataclasses.dataclass(frozen=True)
class Code:
  """Text shown as code: a name, a path, a precision policy."""
  text: str
  kind: ClassVar[str] = "code"


Inline = Union[str, Strong, Code]
Text = Union[Inline, Tuple[Inline, ...]]  # What a paragraph, a list item or a table cell holds.


def inlines(text: Text) -> Tuple[Inline, ...]:
  """`text` as a tuple of inline parts; anything else (a number, None, markup of some other
  kind) is refused here, where the section that made it is still on the stack."""
  parts = text if isinstance(text, tuple) else (text,)
  for part in parts:
    text = part.text if isinstance(part, (Strong, Code)) else part
    if not isinstance(text, str):
      raise TypeError(f"report text must be str, Strong or Code of a str, not {part!r}")
  return parts


@dataclasses.dataclass(frozen=True)
class Paragraph:
  text: Tuple[Inline, ...]
  kind: ClassVar[str] = "paragraph"

  def __init__(self, *parts: Inline):
    object.__setattr__(self, "text", inlines(tuple(parts)))


@dataclasses.dataclass(frozen=True)
class BulletList:
  items: Tuple[Tuple[Inline, ...], ...]
  kind: ClassVar[str] = "list"

  def __init__(self, items: Sequence[Text]):
    object.__setattr__(self, "items", tuple(inlines(item) for item in items))


@dataclasses.dataclass(frozen=True)
class Table:
  """A header row and rows of as many cells (formatted by the section: numbers as text)."""
  header: Tuple[Tuple[Inline, ...], ...]
  rows: Tuple[Tuple[Tuple[Inline, ...], ...], ...]
  kind: ClassVar[str] = "table"

  def __init__(self, header: Sequence[Text], rows: Sequence[Sequence[Text]]):
    header = tuple(inlines(cell) for cell in header)
    rows = tuple(tuple(inlines(cell) for cell in row) for row in rows)
    for number, row in enumerate(rows):
      if len(row) != len(header):
        raise ValueError(f"table row {number} has {len(row)} cells for {len(header)} columns")
    object.__setattr__(self, "header", header)
    object.__setattr__(self, "rows", rows)


@dataclasses.dataclass(frozen=True)
class Chart:
  """A PNG (reporting/plots.py draws them) and its title, its alternative text."""
  title: str
  png: bytes
  kind: ClassVar[str] = "chart"

  def __post_init__(self):
    inlines(self.title)
    if not self.png.startswith(b"\x89PNG\r\n\x1a\n"):
      raise ValueError(f"chart {self.title!r} is not a PNG")

  @property
  def data_uri(self) -> str:
    """The chart inside the page itself: the report needs nothing outside it."""
    return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


Block = Union[Paragraph, BulletList, Table, Chart]


@dataclasses.dataclass(frozen=True)
class Section:
  """A heading and its blocks, in order."""
  heading: str
  blocks: Tuple[Block, ...]

  def __init__(self, heading: str, *blocks: Block):
    inlines(heading)
    for block in blocks:
      if not isinstance(block, (Paragraph, BulletList, Table, Chart)):
        raise TypeError(f"section {heading!r}: a block must be a Paragraph, BulletList, Table "
                        f"or Chart, not {block!r}")
    object.__setattr__(self, "heading", heading)
    object.__setattr__(self, "blocks", tuple(blocks))


@dataclasses.dataclass(frozen=True)
class Report:
  title: str
  about: BulletList  # The run's facts, under the title.
  sections: Tuple[Section, ...]
