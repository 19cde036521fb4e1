"""Small PNG charts for the run report, drawn with Pillow (the pinned stack has no matplotlib)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_WIDTH, _HEIGHT = 640, 420
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 62, 60
_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf"]


def _font(size: int):
  try:
    return ImageFont.load_default(size=size)
  except TypeError:  # Pillow without FreeType sizes.
    return ImageFont.load_default()


class _Axes:
  """A plotting area mapping data coordinates (x in [x0, x1], y in [y0, y1]) to pixels."""

  def __init__(self, title: str, xlabel: str, ylabel: str, x_range, y_range):
    self.image = Image.new("RGB", (_WIDTH, _HEIGHT), "white")
    self.draw = ImageDraw.Draw(self.image)
    self.x0, self.x1 = x_range
    self.y0, self.y1 = y_range
    self.font, self.small = _font(15), _font(12)
    self.draw.text((_WIDTH / 2, 12), title, fill="black", font=self.font, anchor="mt")
    self.draw.text((_WIDTH / 2, _HEIGHT - 14), xlabel, fill="black", font=self.small,
                   anchor="mb")
    self.draw.text((8, _TOP - 20), ylabel, fill="black", font=self.small)
    box = (_LEFT, _TOP, _WIDTH - _RIGHT, _HEIGHT - _BOTTOM)
    for tick in np.linspace(self.y0, self.y1, 6):
      y = self.py(tick)
      self.draw.line((_LEFT, y, _WIDTH - _RIGHT, y), fill="#e6e6e6")
      self.draw.text((_LEFT - 6, y), f"{tick:.2f}", fill="black", font=self.small, anchor="rm")
    self.draw.rectangle(box, outline="black")

  def px(self, x: float) -> float:
    return _LEFT + (x - self.x0) / (self.x1 - self.x0) * (_WIDTH - _LEFT - _RIGHT)

  def py(self, y: float) -> float:
    y = min(max(y, self.y0), self.y1)
    return _HEIGHT - _BOTTOM - (y - self.y0) / (self.y1 - self.y0) * (_HEIGHT - _TOP - _BOTTOM)

  def xtick(self, x: float, label: str) -> None:
    self.draw.text((self.px(x), _HEIGHT - _BOTTOM + 6), label, fill="black", font=self.small,
                   anchor="mt")

  def legend(self, names: Sequence[str], colours: Optional[Sequence[str]] = None) -> None:
    """One row between the title and the plot, so it never hides data."""
    colours = colours or [_COLOURS[i % len(_COLOURS)] for i in range(len(names))]
    x = _LEFT
    for name, colour in zip(names, colours):
      self.draw.rectangle((x, 32, x + 10, 42), fill=colour)
      self.draw.text((x + 14, 31), name, fill="black", font=self.small)
      x += 24 + self.draw.textlength(name, font=self.small)

  def save(self, path: str) -> None:
    self.image.save(path, format="PNG")


def reliability_diagram(path: str, bins: np.ndarray, title: str) -> None:
  """bins: [num_bins, 3] of (count, mean confidence, accuracy). Bars are each bin's accuracy,
  labelled with its example count; the diagonal is perfect calibration; red is the gap to the
  bin's mean confidence."""
  num_bins = len(bins)
  axes = _Axes(title, "confidence (top-label probability)", "accuracy", (0.0, 1.0), (0.0, 1.0))
  for i, (count, confidence, accuracy) in enumerate(bins):
    if count <= 0:
      continue
    left, right = axes.px(i / num_bins) + 1, axes.px((i + 1) / num_bins) - 1
    axes.draw.rectangle((left, axes.py(accuracy), right, axes.py(0)), fill=_COLOURS[0])
    low, high = sorted((accuracy, confidence))
    axes.draw.rectangle((left, axes.py(high), right, axes.py(low)), outline="#d62728", width=2)
    axes.draw.text(((left + right) / 2, axes.py(0) - 4), f"{int(count)}", fill="black",
                   font=axes.small, anchor="mb")  # Examples in the bin.
  axes.draw.line((axes.px(0), axes.py(0), axes.px(1), axes.py(1)), fill="#555555", width=1)
  for tick in np.linspace(0, 1, 6):
    axes.xtick(tick, f"{tick:.1f}")
  axes.legend(["accuracy per bin", "gap to the bin's mean confidence", "perfect calibration"],
              [_COLOURS[0], "#d62728", "#555555"])
  axes.save(path)


def bar_chart(path: str, labels: Sequence[str], series: Dict[str, Sequence[float]], title: str,
              ylabel: str, y_range=(0.0, 1.0)) -> None:
  """Grouped bars: one group per label, one bar per series."""
  axes = _Axes(title, "", ylabel, (0.0, float(len(labels))), y_range)
  width = 0.8 / max(len(series), 1)
  for s, (name, values) in enumerate(series.items()):
    for i, value in enumerate(values):
      if value is None or not np.isfinite(value):
        continue
      left = i + 0.1 + s * width
      axes.draw.rectangle((axes.px(left), axes.py(value), axes.px(left + width) - 1,
                           axes.py(y_range[0])), fill=_COLOURS[s % len(_COLOURS)])
  for i, label in enumerate(labels):
    axes.xtick(i + 0.5, str(label))
  if len(series) > 1:
    axes.legend(list(series))
  axes.save(path)


def line_chart(path: str, x: Sequence[float], series: Dict[str, List[Optional[float]]],
               title: str, xlabel: str, ylabel: str, y_range=(0.0, 1.0)) -> None:
  axes = _Axes(title, xlabel, ylabel, (min(x) - 0.5, max(x) + 0.5), y_range)
  for s, (name, values) in enumerate(series.items()):
    colour = _COLOURS[s % len(_COLOURS)]
    points = [(axes.px(xi), axes.py(v)) for xi, v in zip(x, values) if v is not None]
    if len(points) > 1:
      axes.draw.line(points, fill=colour, width=2)
    for px, py in points:
      axes.draw.ellipse((px - 3, py - 3, px + 3, py + 3), fill=colour)
  for xi in x:
    axes.xtick(xi, str(xi))
  axes.legend(list(series))
  axes.save(path)
