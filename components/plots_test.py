"""The run report's charts: PNGs of the report's size, and what is drawn on them, whatever the
data leaves out."""
import numpy as np
import pytest
from PIL import Image

from components import plots


def _size(path):
  with Image.open(path) as image:
    return image.format, image.size


@pytest.fixture
def drawn(monkeypatch):
  """The axes of each chart saved, by path."""
  axes, save = {}, plots._save

  def recording_save(figure, path):
    axes[path] = figure.axes[0]
    save(figure, path)

  monkeypatch.setattr(plots, "_save", recording_save)
  return axes


def _bars(container):
  """(left edge, bottom, height) of each bar."""
  return [(round(bar.get_x(), 6), round(bar.get_y(), 6), round(bar.get_height(), 6))
          for bar in container.patches]


def test_a_reliability_diagram_skips_empty_bins(tmp_path, drawn):
  bins = np.array([[0, 0, 0], [3, 0.15, 0.0], [0, 0, 0], [10, 0.9, 1.0]], np.float64)
  path = str(tmp_path / "reliability.png")
  plots.reliability_diagram(path, bins, "eval set")
  assert _size(path) == ("PNG", (640, 420))
  accuracy, gap = drawn[path].containers
  assert _bars(accuracy) == [(0.25, 0.0, 0.0), (0.75, 0.0, 1.0)]  # Bins 1 and 3 only.
  assert _bars(gap) == [(0.25, 0.0, 0.15), (0.75, 0.9, 0.1)]  # From accuracy to confidence.
  assert [text.get_text() for text in drawn[path].texts] == ["3", "10"]  # Their counts.


def test_bar_and_line_charts_leave_out_missing_values(tmp_path, drawn):
  bars, lines = str(tmp_path / "bars.png"), str(tmp_path / "lines.png")
  plots.bar_chart(bars, ["gaussian_noise", "contrast"], {"accuracy": [0.5, None],
                                                         "ECE": [float("nan"), 0.2]},
                  "per corruption", "value")
  plots.line_chart(lines, [1, 2, 3], {"noise": [0.9, None, 0.4], "blur": [0.8, 0.7, 0.6]},
                   "by severity", "severity", "accuracy")
  assert _size(bars) == _size(lines) == ("PNG", (640, 420))
  accuracy, ece = drawn[bars].containers
  assert (accuracy.get_label(), _bars(accuracy)) == ("accuracy", [(-0.4, 0.0, 0.5)])
  assert (ece.get_label(), _bars(ece)) == ("ECE", [(1.0, 0.0, 0.2)])  # Group 1, second slot.
  noise, blur = drawn[lines].lines
  np.testing.assert_array_equal(noise.get_ydata(), [0.9, np.nan, 0.4])  # A gap, not a zero.
  np.testing.assert_array_equal(blur.get_ydata(), [0.8, 0.7, 0.6])
  assert [noise.get_label(), blur.get_label()] == ["noise", "blur"]
