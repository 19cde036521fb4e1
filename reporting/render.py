"""The report (reporting/document.py) as an HTML page and as Markdown, each escaping every text
it is given, so whatever a section holds (a class name, a file name, a message quoting one) is
shown as text.

HTML: the Jinja2 template templates/report.html with autoescape on; its charts are `data:` URIs,
so the page needs nothing outside itself (the KFP UI shows it in a sandboxed frame that runs
scripts: only the page's own markup may be markup).

Markdown (CommonMark with GitHub's tables, as the KFP UI's markdown-to-jsx reads it): every text
is written with a backslash before each character that could start markup (backslash escapes are
CommonMark's, and markdown-to-jsx's `TEXT_ESCAPED_R` takes any escaped punctuation as text);
`scheme://` and `www.` are broken with an escape so that no renderer makes a bare link of them;
line breaks become spaces (a line break would end a table row or a paragraph); a paragraph or
list item that would open a list, a heading or a quote starts with an escape.
"""
from __future__ import annotations

import re
from typing import List, Tuple

import jinja2

from reporting.document import BulletList, Chart, Code, Inline, Paragraph, Report, Strong, Table

_ENVIRONMENT = jinja2.Environment(loader=jinja2.PackageLoader("reporting"), autoescape=True,
                                  undefined=jinja2.StrictUndefined, trim_blocks=True,
                                  lstrip_blocks=True)

# Markdown: characters that start markup inline (code, emphasis, links and images, raw HTML and
# autolinks, table cells, entities, strikethrough, headings, the @ of an e-mail autolink), a
# colon before `//` (a bare URL) and the dot after `www` (a bare web address).
_MARKUP = re.compile(r"[\\`*_\[\]<>|&~#@]|(?<=\w):(?=//)|(?i:(?<=www))\.")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLOCK_START = re.compile(r"[-+=]|\d+(?=[.)])")  # A list item, a heading underline, a list.
_CODE_UNSAFE = re.compile(r"[`|\r\n]|^\s|\s$|^$")  # Text a code span would not hold as is.


def to_html(report: Report) -> str:
  return _ENVIRONMENT.get_template("report.html").render(report=report)


def escape_markdown(text: str) -> str:
  """`text` as Markdown that shows exactly its characters, on one line."""
  return _MARKUP.sub(lambda match: "\\" + match.group(0), _LINE_BREAK.sub(" ", text))


def _inline(part: Inline) -> str:
  if isinstance(part, Strong):
    inner = part.text.strip()
    if not inner:
      return escape_markdown(part.text)
    leading, trailing = part.text[:len(part.text) - len(part.text.lstrip())], \
        part.text[len(part.text.rstrip()):]
    return f"{escape_markdown(leading)}**{escape_markdown(inner)}**{escape_markdown(trailing)}"
  if isinstance(part, Code):
    # A code span's backticks, a pipe inside a table (GitHub's tables and markdown-to-jsx
    # disagree on it) or a line break cannot be held safely: such code is written as text.
    return escape_markdown(part.text) if _CODE_UNSAFE.search(part.text) else f"`{part.text}`"
  return escape_markdown(part)


def _text(parts: Tuple[Inline, ...]) -> str:
  return "".join(_inline(part) for part in parts)


def _block_text(parts: Tuple[Inline, ...]) -> str:
  """Text that starts a block: no leading blank (an indented code block), and an escape before
  what would open a list or a setext heading."""
  text = _text(parts).lstrip(" \t")
  match = _BLOCK_START.match(text)
  if match:
    text = text[:match.end()] + "\\" + text[match.end():] if match.group(0)[0].isdigit() \
        else "\\" + text
  return text


def _bullets(items) -> List[str]:
  return [f"- {_block_text(item)}" for item in items]


def _block(block) -> List[str]:
  if isinstance(block, Paragraph):
    return [_block_text(block.text)]
  if isinstance(block, BulletList):
    return _bullets(block.items)
  if isinstance(block, Table):
    return (["| " + " | ".join(_text(cell) for cell in block.header) + " |",
             "|" + " --- |" * len(block.header)] +
            ["| " + " | ".join(_text(cell) for cell in row) + " |" for row in block.rows])
  if isinstance(block, Chart):
    return [f"![{escape_markdown(block.title)}]({block.data_uri})"]
  raise TypeError(f"not a report block: {block!r}")


def to_markdown(report: Report) -> str:
  lines = [f"# {escape_markdown(report.title)}", ""] + _bullets(report.about.items) + [""]
  for section in report.sections:
    lines += [f"## {escape_markdown(section.heading)}", ""]
    for block in section.blocks:
      lines += _block(block) + [""]
  return "\n".join(lines)
