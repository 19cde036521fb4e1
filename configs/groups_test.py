"""Grouped configs: built from flat field names, flattened back, each group validated alone."""
import dataclasses
from typing import Optional

import pytest

from configs import groups


@dataclasses.dataclass(frozen=True)
class Model:
  """Model: the network."""
  depth: int = 28  # Depth.
  width: int = 10  # Width.

  def __post_init__(self):
    if self.depth < 10:
      raise ValueError(f"depth={self.depth}: must be >= 10")


@dataclasses.dataclass(frozen=True)
class Cluster:
  """Cluster: where it runs."""
  image: str = ""  # Image.


@dataclasses.dataclass(frozen=True)
class Run:
  model: Model = dataclasses.field(default_factory=Model)
  cluster: Optional[Cluster] = None


def test_leaf_fields_have_flat_names_and_dotted_paths():
  assert groups.leaf_paths(Run) == {"depth": ("model", "depth"), "width": ("model", "width"),
                                    "image": ("cluster", "image")}
  assert groups.leaf_hints(Run) == {"depth": int, "width": int, "image": str}
  assert groups.flat_name(Run, "model.depth") == "depth"
  assert groups.flat_name(Run, "cluster.depth") == "cluster.depth"  # No such path: left as is.


def test_build_over_a_start_rebuilds_only_the_groups_given_a_value():
  start = groups.build(Run, {"depth": 16})
  assert start == Run(model=Model(depth=16)) and start.cluster is None
  changed = groups.build(Run, {"image": "i"}, start)
  assert changed.model is start.model and changed.cluster == Cluster(image="i")
  assert groups.flatten(changed) == {"depth": 16, "width": 10, "image": "i"}
  assert groups.flatten(start) == {"depth": 16, "width": 10}  # An unset group has no fields.


def test_a_group_validates_itself_and_unknown_names_are_refused():
  with pytest.raises(ValueError, match="depth=4: must be >= 10"):
    groups.build(Run, {"depth": 4})
  with pytest.raises(ValueError, match=r"Unknown config field\(s\): \['dept'\]"):
    groups.build(Run, {"dept": 16})


def test_help_sections_are_the_groups_in_order_with_the_values_of_a_config():
  assert groups.sections(Run) == [("Model: the network", "model.", Model),
                                  ("Cluster: where it runs", "cluster.", Cluster)]
  assert groups.defaults(groups.build(Run, {"width": 2}), Run) == {
      "depth": 28, "width": 2, "image": ""}
