"""The run report's charts: PNGs of the report's size, and what is drawn on them, whatever the
data leaves out and whatever the class names hold."""
import io

import numpy as np
import pytest
from PIL import Image

from reporting import plots


def _size(png):
  with Image.open(io.BytesIO(png)) as image:
    return image.format, image.size


@pytest.fixture
def drawn(monkeypatch):
  """The axes of each chart drawn, in order."""
  axes, png = [], plots._png

  def recording_png(figure):
    axes.append(figure.axes[0])
    return png(figure)

  monkeypatch.setattr(plots, "_png", recording_png)
  return axes


def _bars(container):
  """(left edge, bottom, height) of each bar."""
  return [(round(bar.get_x(), 6), round(bar.get_y(), 6), round(bar.get_height(), 6))
          for bar in container.patches]


def test_a_reliability_diagram_skips_empty_bins(drawn):
  bins = np.array([[0, 0, 0], [3, 0.15, 0.0], [0, 0, 0], [10, 0.9, 1.0]], np.float64)
  png = plots.reliability_diagram(bins, "eval set")
  assert _size(png) == ("PNG", (640, 420))
  [axes] = drawn
  accuracy, gap = axes.containers
  assert _bars(accuracy) == [(0.25, 0.0, 0.0), (0.75, 0.0, 1.0)]  # Bins 1 and 3 only.
  assert _bars(gap) == [(0.25, 0.0, 0.15), (0.75, 0.9, 0.1)]  # From accuracy to confidence.
  assert [text.get_text() for text in axes.texts] == ["3", "10"]  # Their counts.


def test_bar_and_line_charts_leave_out_missing_values(drawn):
  bars = plots.bar_chart(["gaussian_noise", "contrast"], {"accuracy": [0.5, None],
                                                         "ECE": [float("nan"), 0.2]},
                         "per corruption", "value")
  lines = plots.line_chart([1, 2, 3], {"noise": [0.9, None, 0.4], "blur": [0.8, 0.7, 0.6]},
                           "by severity", "severity", "accuracy")
  assert _size(bars) == _size(lines) == ("PNG", (640, 420))
  bar_axes, line_axes = drawn
  accuracy, ece = bar_axes.containers
  assert (accuracy.get_label(), _bars(accuracy)) == ("accuracy", [(-0.4, 0.0, 0.5)])
  assert (ece.get_label(), _bars(ece)) == ("ECE", [(1.0, 0.0, 0.2)])  # Group 1, second slot.
  noise, blur = line_axes.lines
  np.testing.assert_array_equal(noise.get_ydata(), [0.9, np.nan, 0.4])  # A gap, not a zero.
  np.testing.assert_array_equal(blur.get_ydata(), [0.8, 0.7, 0.6])
  assert [noise.get_label(), blur.get_label()] == ["noise", "blur"]


def test_class_names_are_drawn_as_they_are_not_as_matplotlib_math(drawn):
  """matplotlib reads `$...$` as math: a class folder named so failed the whole report."""
  names = ["a$\\undefinedcommand$b", "$x", "<svg onload=alert(1)>"]
  png = plots.bar_chart(names, {"test": [0.5, 0.6, 0.7]}, "per class", "accuracy")
  assert _size(png) == ("PNG", (640, 420))
  [axes] = drawn
  assert [label.get_text() for label in axes.get_xticklabels()] == names
