"""The run report's PNG charts, drawn with matplotlib (headless: the Agg backend), each returned
as the PNG's bytes (a document.Chart holds them). Text that comes from the data (class names)
is drawn as it is, never read as matplotlib's math (`$...$`).
"""
from __future__ import annotations

import io
from typing import Callable, Dict, List, Optional, Sequence

import matplotlib
import matplotlib.ticker
import numpy as np

matplotlib.use("Agg")  # No display in a pipeline step or a CI job.
from matplotlib import pyplot  # noqa: E402  After the backend is chosen.

_SIZE = (6.4, 4.2)  # Inches at 100 dpi: 640 x 420 pixels.
_DPI = 100


def _figure(title: str, xlabel: str, ylabel: str, y_range):
  figure, axes = pyplot.subplots(figsize=_SIZE, dpi=_DPI)
  axes.set_title(title)
  axes.set_xlabel(xlabel)
  axes.set_ylabel(ylabel)
  axes.set_ylim(*y_range)
  axes.grid(axis="y", color="#e6e6e6")
  axes.set_axisbelow(True)
  return figure, axes


def _png(figure) -> bytes:
  figure.tight_layout()
  buffer = io.BytesIO()
  figure.savefig(buffer, format="png")
  pyplot.close(figure)
  return buffer.getvalue()


def reliability_diagram(bins: np.ndarray, title: str) -> bytes:
  """bins: [num_bins, 3] of (count, mean confidence, accuracy). Bars are each bin's accuracy,
  labelled with its example count; the diagonal is perfect calibration; red is the gap to the
  bin's mean confidence."""
  num_bins = len(bins)
  figure, axes = _figure(title, "confidence (top-label probability)", "accuracy", (0.0, 1.0))
  edges = np.arange(num_bins) / num_bins
  occupied = bins[:, 0] > 0
  count, confidence, accuracy = bins[occupied].T
  left = edges[occupied]
  bars = axes.bar(left, accuracy, width=1.0 / num_bins, align="edge", edgecolor="white",
                  label="accuracy per bin")
  axes.bar(left, np.abs(confidence - accuracy), bottom=np.minimum(confidence, accuracy),
           width=1.0 / num_bins, align="edge", fill=False, edgecolor="#d62728", linewidth=1.5,
           label="gap to the bin's mean confidence")
  axes.bar_label(bars, labels=[f"{int(c)}" for c in count], fontsize=7)  # Examples per bin.
  axes.plot([0, 1], [0, 1], color="#555555", linewidth=1, label="perfect calibration")
  axes.set_xlim(0.0, 1.0)
  axes.legend(loc="upper left", fontsize=8)
  return _png(figure)


def bar_chart(labels: Sequence[str], series: Dict[str, Sequence[float]], title: str,
              ylabel: str, y_range=(0.0, 1.0)) -> bytes:
  """Grouped bars: one group per label, one bar per series (a missing value draws no bar)."""
  figure, axes = _figure(title, "", ylabel, y_range)
  width = 0.8 / max(len(series), 1)
  for s, (name, values) in enumerate(series.items()):
    shown = [(i, v) for i, v in enumerate(values) if v is not None and np.isfinite(v)]
    if shown:
      positions, heights = zip(*shown)
      axes.bar(np.array(positions) - 0.4 + (s + 0.5) * width, heights, width=width, label=name)
  long_labels = max((len(str(label)) for label in labels), default=0) > 4
  axes.set_xticks(range(len(labels)), [str(label) for label in labels], fontsize=8,
                  rotation=45 if long_labels else 0, ha="right" if long_labels else "center",
                  parse_math=False)
  if len(series) > 1:
    axes.legend(fontsize=8)
  return _png(figure)


def line_chart(x: Sequence[float], series: Dict[str, List[Optional[float]]],
               title: str, xlabel: str, ylabel: str, y_range=(0.0, 1.0)) -> bytes:
  """One line per series; a missing value breaks its line."""
  figure, axes = _figure(title, xlabel, ylabel, y_range)
  for name, values in series.items():
    axes.plot(x, [np.nan if v is None else v for v in values], marker="o", label=name)
  axes.set_xticks(list(x))
  axes.legend(fontsize=8)
  return _png(figure)


def distance_chart(temperatures: Callable[[np.ndarray], np.ndarray],
                   groups: Dict[str, np.ndarray], title: str) -> bytes:
  """Top: temperatures(z) over the range of the groups' distance scores z (log scale, the line
  T = 1 marked). Bottom: each group's histogram of z (as a fraction of the group)."""
  everything = np.concatenate([g for g in groups.values() if len(g)])
  low, high = np.floor(everything.min()), np.ceil(everything.max())
  edges = np.linspace(low, high, 41)
  figure, (top, bottom) = pyplot.subplots(2, 1, sharex=True, figsize=(_SIZE[0], 6.4), dpi=_DPI,
                                          gridspec_kw={"height_ratios": [1, 1.4]})
  z = np.linspace(low, high, 200)
  top.plot(z, temperatures(z), color="#d62728")
  top.axhline(1.0, color="#555555", linewidth=1, linestyle="--")
  top.set_yscale("log")
  top.yaxis.set_major_locator(matplotlib.ticker.FixedLocator([0.1, 0.2, 0.5, 1, 2, 5, 10, 20]))
  top.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
  top.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
  top.set_title(title)
  top.set_ylabel("temperature T")
  top.grid(color="#e6e6e6")
  for name, scores in groups.items():
    if len(scores):
      bottom.hist(scores, bins=edges, weights=np.full(len(scores), 1.0 / len(scores)),
                  histtype="step", linewidth=1.5, label=name)
  bottom.set_xlabel("distance score z (standard deviations of the clean eval log distances)")
  bottom.set_ylabel("fraction of the set")
  bottom.legend(fontsize=7)
  return _png(figure)


def history_chart(labels: Sequence[str], series: Dict[str, List[Optional[float]]],
                  title: str, ylabel: str, y_range=(0.0, 1.0)) -> bytes:
  """One line per series over the runs, in order, each run's tick named by its label (drawn as
  it is); a run without a value (one that trained nothing) breaks the line."""
  figure, axes = _figure(title, "run (span)", ylabel, y_range)
  x = list(range(len(labels)))
  for name, values in series.items():
    axes.plot(x, [np.nan if v is None else v for v in values], marker="o", label=name)
  long_labels = max((len(label) for label in labels), default=0) > 6
  axes.set_xticks(x, list(labels), fontsize=8, rotation=45 if long_labels else 0,
                  ha="right" if long_labels else "center", parse_math=False)
  axes.legend(fontsize=8)
  return _png(figure)


def distribution_chart(edges: Sequence[float], series: Dict[str, Sequence[float]], title: str,
                       xlabel: str) -> bytes:
  """Histograms over shared bin edges, one outline per series (each bin's share of its
  series' examples): the baseline's and the new data's distribution of one feature."""
  top = max((max(values, default=0.0) for values in series.values()), default=0.0)
  figure, axes = _figure(title, xlabel, "share of images", (0.0, max(top * 1.15, 0.01)))
  for name, values in series.items():
    axes.stairs(values, edges, label=name, linewidth=1.8)
  axes.legend(fontsize=8)
  return _png(figure)
