"""The run report's charts: PNGs of the report's size, whatever the data leaves out."""
import numpy as np
from PIL import Image

from components import plots


def _size(path):
  with Image.open(path) as image:
    return image.format, image.size


def test_a_reliability_diagram_skips_empty_bins(tmp_path):
  bins = np.array([[0, 0, 0], [3, 0.15, 0.0], [0, 0, 0], [10, 0.9, 1.0]], np.float64)
  path = str(tmp_path / "reliability.png")
  plots.reliability_diagram(path, bins, "eval set")
  assert _size(path) == ("PNG", (640, 420))


def test_bar_and_line_charts_leave_out_missing_values(tmp_path):
  bars, lines = str(tmp_path / "bars.png"), str(tmp_path / "lines.png")
  plots.bar_chart(bars, ["gaussian_noise", "contrast"], {"accuracy": [0.5, None],
                                                         "ECE": [float("nan"), 0.2]},
                  "per corruption", "value")
  plots.line_chart(lines, [1, 2, 3], {"noise": [0.9, None, 0.4], "blur": [0.8, 0.7, 0.6]},
                   "by severity", "severity", "accuracy")
  assert _size(bars) == _size(lines) == ("PNG", (640, 420))
