"""The image definition: TFX 1.16's image plus every package the pipeline imports, installed.
(What a `docker build` would copy and install; tests/kfp_docker_test.py builds and runs it.)"""
import ast
import fnmatch
import os
import re

import tfx

from kubeflow.cluster_config import IMAGE_PACKAGES, IMAGE_PROJECT_DIR, PROJECT_DIR
from test_support import container_image


def _instructions():
  return container_image.dockerfile_instructions()


def _project_imports(package):
  """Top-level project packages that the modules of `package` import."""
  project = {name for name in os.listdir(PROJECT_DIR)
             if os.path.isfile(os.path.join(PROJECT_DIR, name, "__init__.py"))}
  found = set()
  for root, _, files in os.walk(os.path.join(PROJECT_DIR, package)):
    for name in files:
      if name.endswith(".py") and not name.endswith("_test.py") and name != "conftest.py":
        with open(os.path.join(root, name)) as f:
          tree = ast.parse(f.read())
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
          elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
  return found & project


def test_the_image_is_the_tested_tfx_release():
  instructions = _instructions()
  # Users build on TFX's image; the local build (test_support/container_image.py) passes its own.
  assert instructions[:2] == [("ARG", f"BASE_IMAGE=gcr.io/tfx-oss-public/tfx:{tfx.__version__}"),
                              ("FROM", "${BASE_IMAGE}")]
  assert tfx.__version__ == "1.16.0"
  assert ("WORKDIR", IMAGE_PROJECT_DIR) in instructions


def test_every_package_the_pipeline_imports_is_copied_then_installed():
  instructions = _instructions()
  copies = [args.split() for op, args in instructions if op == "COPY"]
  copied = {source.rstrip("/") for *sources, _ in copies for source in sources}
  needed = set(IMAGE_PACKAGES)
  for package in IMAGE_PACKAGES:
    needed |= _project_imports(package)
  assert needed == set(IMAGE_PACKAGES)  # Nothing imported from outside what the image holds.
  assert needed | {"requirements.lock", "pyproject.toml"} <= copied
  for *sources, destination in copies:  # Each into the same place under WORKDIR.
    assert all(destination == "./" or destination == source for source in sources)
  runs = [(index, args) for index, (op, args) in enumerate(instructions) if op == "RUN"]
  lock_install = [i for i, args in runs
                  if "pip install" in args and "--no-deps -r requirements.lock" in args]
  project_install = [i for i, args in runs if re.search(r"pip install .*--no-deps \.( |$)", args)]
  last_copy = max(i for i, (op, _) in enumerate(instructions) if op == "COPY")
  assert lock_install and project_install and project_install[0] > last_copy


def test_pip_install_of_the_project_includes_every_package_and_the_schema():
  with open(os.path.join(PROJECT_DIR, "pyproject.toml")) as f:
    pyproject = f.read()
  for package in IMAGE_PACKAGES:
    assert f'"{package}*"' in pyproject
  assert re.search(r'components = \[[^]]*"\*\.pbtxt"', pyproject)
  assert re.search(r'reporting = \[[^]]*"templates/\*\.html"', pyproject)  # The report's page.


def test_the_lock_is_resolved_for_the_images_python():
  with open(os.path.join(PROJECT_DIR, "requirements.lock")) as f:
    header = f.read(500)
  assert "--python-version 3.10" in header  # The TFX 1.16 image runs Python 3.10.


def test_dockerignore_keeps_what_the_image_copies():
  with open(os.path.join(PROJECT_DIR, ".dockerignore")) as f:
    patterns = [line.strip() for line in f if line.strip() and not line.startswith("#")]
  shipped = ["requirements.lock", "pyproject.toml", "components/schema.pbtxt",
             "reporting/templates/report.html"]
  for package in IMAGE_PACKAGES:
    shipped += [os.path.join(package, name)
                for name in os.listdir(os.path.join(PROJECT_DIR, package))
                if name.endswith(".py") and not name.endswith("_test.py") and name != "conftest.py"]
  for path in shipped:
    assert not any(fnmatch.fnmatch(path, pattern) or path.startswith(pattern.rstrip("/") + "/")
                   for pattern in patterns), path
  assert ".venv" in patterns and "outputs" in patterns


def test_the_image_imports_the_command_every_kfp_container_runs():
  """kubeflow_target=kfp starts every container with `python -m kubeflow.kfp_entrypoint`; the
  build fails if that module does not import in the image."""
  from kubeflow import kfp_entrypoint
  checks = [args for op, args in _instructions() if op == "RUN" and "python -c" in args]
  assert any(kfp_entrypoint.COMMAND[-1] in args for args in checks)
  assert kfp_entrypoint.COMMAND[:2] == ("python", "-m")


def test_the_image_keeps_beams_boot_entrypoint_to_serve_as_sdk_harness():
  # The TFX 1.16 image copies /opt/apache/beam from Beam's SDK image and makes its boot program
  # the ENTRYPOINT (tfx/tools/docker/Dockerfile at v1.16.0); Dataflow and portable runners
  # start SDK workers through it, so this image must not replace it.
  instructions = _instructions()
  assert not [args for op, args in instructions if op in ("ENTRYPOINT", "CMD")]
  with open(os.path.join(PROJECT_DIR, "requirements.lock")) as f:
    lock = f.read()
  # The SDK the workers run is the lock's, installed over the image's by the lock install.
  assert re.search(r"^apache-beam==2\.59\.0$", lock, re.M)


def test_the_image_reads_and_writes_s3_with_tensorflow_and_beam():
  with open(os.path.join(PROJECT_DIR, "requirements.lock")) as f:
    lock = f.read()
  assert re.search(r"^tensorflow-io==0\.37\.\d+$", lock, re.M)  # Pairs with TF 2.16.
  assert re.search(r"^tensorflow==2\.16\.\d+$", lock, re.M)
  assert re.search(r"^boto3==", lock, re.M)  # apache_beam.io.aws.
  # The build fails unless TensorFlow's S3 filesystem registers in the image.
  runs = [args for op, args in _instructions() if op == "RUN"]
  assert any("object_storage.register_tensorflow_s3()" in args for args in runs)
