"""How the packages may depend on each other, checked on every import statement (also those
inside functions). Lower layers never import higher ones; the graph never imports a runner.

  configs, storage         plain data and the flag parser; object storage
  trainer_module           what runs inside Transform and the Trainer
  components               the custom TFX components (ingestion, the evaluation set, the
                           served-model check, the Pusher, ...), steps of the graph
  reporting                the run report: its document, its HTML and Markdown, its sections and
                           charts, and the RunReport step, the graph's last step (so below
                           pipeline, above the components whose outputs it reads)
  pipeline                 the config object, the graph and its gate
  local_runner, kubeflow   the two runners (the local one reads its runs back from MLMD and
                           prints their summary from the report's recorded figures)
  test_support             references and stand-ins for tests and benches, never for the code
"""
import ast
import os

import pytest

from tests.conftest import REPO

MAY_IMPORT = {
    "configs": {"configs"},
    "storage": {"storage"},
    "trainer_module": {"trainer_module", "configs"},
    "components": {"components", "trainer_module", "storage"},
    "reporting": {"reporting", "components", "trainer_module", "storage", "configs"},
    "pipeline": {"pipeline", "reporting", "components", "trainer_module", "storage", "configs"},
    "local_runner": {"local_runner", "reporting", "pipeline", "components", "trainer_module",
                     "storage", "configs"},
    "kubeflow": {"kubeflow", "reporting", "pipeline", "components", "trainer_module", "storage",
                 "configs"},
}
FIRST_PARTY = set(MAY_IMPORT) | {"test_support", "tests", "bench"}


def absolute_imports(path):
  """Every `import x` and absolute `from x import y` statement in `path`, wherever it is."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  return [node for node in ast.walk(tree) if isinstance(node, ast.Import) or (
      isinstance(node, ast.ImportFrom) and node.level == 0 and node.module)]


def first_party_imports(path):
  """(line, top-level package) of every absolute import of a first-party package in `path`."""
  for node in absolute_imports(path):
    names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
             else [node.module])
    for name in names:
      if name.split(".")[0] in FIRST_PARTY:
        yield node.lineno, name.split(".")[0]


def modules(package):
  """The package's code modules (tests and pytest's conftest files may import `test_support`)."""
  for root, _, files in os.walk(os.path.join(REPO, package)):
    for name in sorted(files):
      if name.endswith(".py") and not name.endswith("_test.py") and name != "conftest.py":
        yield os.path.join(root, name)


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_the_layers_below_it(package):
  wrong = [f"{os.path.relpath(path, REPO)}:{line} imports {imported}"
           for path in modules(package) for line, imported in first_party_imports(path)
           if imported not in MAY_IMPORT[package]]
  assert not wrong, "\n".join(wrong)


def test_the_check_sees_an_import_inside_a_function(tmp_path):
  module = tmp_path / "module.py"
  module.write_text("def f():\n  from kubeflow import cluster\n  import os\n")
  assert list(first_party_imports(str(module))) == [(2, "kubeflow")]


def module_imports(path):
  """The first-party modules `path` imports (a name taken from a package is its module when
  there is one), TYPE_CHECKING and in-function imports included."""
  for node in absolute_imports(path):
    candidates = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                  [f"{node.module}.{alias.name}" for alias in node.names] + [node.module])
    for name in candidates:
      relative = os.path.join(REPO, *name.split("."))
      if name.split(".")[0] in MAY_IMPORT and os.path.isfile(relative + ".py"):
        yield name
        if not isinstance(node, ast.Import):
          break


def test_no_two_modules_import_each_other_through_any_path():
  graph = {}
  for package in MAY_IMPORT:
    for path in modules(package):
      name = os.path.relpath(path, REPO)[:-len(".py")].replace(os.sep, ".")
      graph[name] = set(module_imports(path)) - {name}
  circles, index, low, stack, counter = [], {}, {}, [], [0]

  def visit(node):  # Tarjan's strongly connected components.
    index[node] = low[node] = counter[0]
    counter[0] += 1
    stack.append(node)
    for target in graph.get(node, ()):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = []
      while not component or component[-1] != node:
        component.append(stack.pop())
      if len(component) > 1:
        circles.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  assert not circles, circles


TRAINER_CONFIG = os.path.join(REPO, "trainer_module", "config.py")
MAX_READERS = 4  # Modules that read a trainer setting, besides its definition.


def trainer_settings(path=TRAINER_CONFIG):
  """{group: its field names} of TrainerConfig, read from its definition."""
  classes = {node.name: node for node in ast.parse(open(path).read()).body
             if isinstance(node, ast.ClassDef)}

  def fields(cls):
    return [node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)]

  return {group: fields(classes[ast.unparse(node.annotation)])
          for group, node in ((node.target.id, node) for node in classes["TrainerConfig"].body
                              if isinstance(node, ast.AnnAssign))}


def settings_read(path, settings):
  """The `group.field` settings a module reads as `<anything>.group.field` (comments and
  strings are not reads)."""
  reads = set()
  for node in ast.walk(ast.parse(open(path).read(), path)):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
        and node.attr in settings.get(node.value.attr, ())):
      reads.add(f"{node.value.attr}.{node.attr}")
  return reads


def test_a_trainer_setting_is_read_in_at_most_four_modules_besides_its_definition():
  """The config travels whole from the flag to the code that uses a setting: the runner, the
  graph, the Trainer's run_fn and the training job hand it on without reading every field, so
  a setting is named where it is defined (with its help and rules) and where it is used
  (`--train_epochs`: trainer_module/config.py and training_loop.py)."""
  settings = trainer_settings()
  readers = {}
  for package in MAY_IMPORT:
    for path in modules(package):
      if path != TRAINER_CONFIG:
        for setting in settings_read(path, settings):
          readers.setdefault(setting, []).append(os.path.relpath(path, REPO))
  assert readers["training.train_epochs"] == ["trainer_module/training_loop.py"]
  spread = {setting: paths for setting, paths in readers.items() if len(paths) > MAX_READERS}
  assert not spread, spread


def test_the_reader_count_sees_a_read_through_any_object_and_ignores_comments(tmp_path):
  module = tmp_path / "module.py"
  module.write_text("def f(job):\n  # config.training.seed\n"
                    "  return job.config.training.train_epochs, 'x.model.depth'\n")
  assert settings_read(str(module), trainer_settings()) == {"training.train_epochs"}
