"""test_support/container_image.py without podman: what names the image (its cache key), where the
Debian base comes from, podman's settings; and what local-run gives each container."""
import os
import resource
import shutil

import pytest

from kubeflow import local_run
from test_support import container_image


@pytest.fixture
def project(tmp_path):
  """A copy of what the build reads: the Dockerfile, .dockerignore and the copied sources."""
  for name in ["Dockerfile", ".dockerignore", "requirements.lock", "pyproject.toml"]:
    shutil.copy(os.path.join(container_image.PROJECT_DIR, name), tmp_path / name)
  for package in ["pipeline", "reporting", "components", "trainer_module", "kubeflow", "storage",
                  "configs"]:
    shutil.copytree(os.path.join(container_image.PROJECT_DIR, package), tmp_path / package,
                    ignore=shutil.ignore_patterns("__pycache__"))
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "notes.md").write_text("not in the image\n")
  return tmp_path


def test_the_image_name_follows_what_the_build_copies_and_nothing_else(project):
  tag = container_image.image_tag("base-1", str(project))
  assert tag.startswith(container_image.IMAGE_REPOSITORY + ":")
  assert container_image.image_tag("base-1", str(project)) == tag
  copied = container_image.copied_files(str(project))
  assert "storage/object_storage.py" in copied and "requirements.lock" in copied
  assert not [path for path in copied if path.endswith("_test.py") or "__pycache__" in path]
  # Not copied: a test, the docs.
  (project / "storage" / "object_storage_test.py").write_text("# changed\n")
  (project / "docs" / "notes.md").write_text("changed\n")
  assert container_image.image_tag("base-1", str(project)) == tag
  # Copied: a source file, the lock; and another base.
  assert container_image.image_tag("base-2", str(project)) != tag
  with open(project / "storage" / "object_storage.py", "a") as f:
    f.write("# changed\n")
  changed = container_image.image_tag("base-1", str(project))
  assert changed != tag
  with open(project / "requirements.lock", "a") as f:
    f.write("# changed\n")
  assert container_image.image_tag("base-1", str(project)) not in (tag, changed)


@pytest.mark.parametrize("text", [
    "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
    "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n",
    "deb http://mirror.example/debian-security bookworm-security main\n"
    "deb [arch=amd64] http://mirror.example/debian bookworm main\n",
])
def test_the_debian_mirror_is_the_one_apt_uses(tmp_path, text):
  (tmp_path / "debian.sources").write_text(text)
  assert container_image.debian_mirror([str(tmp_path)]) == "http://mirror.example/debian"


def test_no_debian_mirror_is_named_in_the_error(tmp_path):
  with pytest.raises(RuntimeError, match="No Debian mirror in .*debootstrap needs one"):
    container_image.debian_mirror([str(tmp_path / "missing.list")])


def test_podmans_settings_stay_within_this_processes_limits(tmp_path):
  text = open(container_image.containers_conf(str(tmp_path / "containers.conf"))).read()
  assert 'runtime = "runc"' in text
  for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
    hard = resource.getrlimit(limit)[1]
    value = int(text.split(f'"{name}=')[1].split(":")[0])
    assert value <= container_image.PODMAN_RLIMITS[name]
    assert hard == resource.RLIM_INFINITY or value <= hard


def test_each_container_gets_the_object_storage_settings_and_nothing_else():
  environ = {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "key",
             "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "", "HOME": "/root",
             "DOCKER_HOST": "unix:///x.sock"}
  assert local_run.container_environment(environ) == {
      "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "key",
      "AWS_SECRET_ACCESS_KEY": "secret"}
