"""The pipeline's image built from the project's Dockerfile on this machine, without Docker.

podman (Debian's, with runc: `make container-packages`) builds the real Dockerfile on a base
made here with debootstrap, since TFX's official image cannot be pulled; `PodmanService`
answers the Docker API on a unix socket for the `docker` client that kfp.local's DockerRunner
uses. What the local base changes against the official image is in docs/kubeflow.md ("The
image, built and run here").

podman needs, on these machines: the runc runtime (crun refuses the kernel's hybrid cgroup v1
layout), default ulimits at or below this process's hard limits (podman raises nofile/nproc
above them and has no CAP_SYS_RESOURCE), both in a containers.conf of our own named by
CONTAINERS_CONF; and builds reach the package registries with the host's network and CA
bundle (the registries' certificates chain to the egress proxy's CA).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Mapping, Optional, Tuple

PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK_DIR = os.path.join(PROJECT_DIR, "outputs", "container")  # containers.conf, build log, rootfs.
BASE_IMAGE = "localhost/wrn-local-base:bookworm"
IMAGE_REPOSITORY = "localhost/wrn-pipeline"
DEBIAN_SUITE = "bookworm"
# Python with pip in a venv first on PATH, as the official image's conda Python is; python3-dev
# and g++ because the lock's pyfarmhash (TFDV's) is a C++ sdist the official image has built.
BASE_PACKAGES = ("python3", "python3-venv", "python3-dev", "g++", "ca-certificates")
BASE_VENV = "/opt/venv"
# The official image's Python is 3.10, the lock's target; bookworm's is 3.11, where tfx and
# ml-pipelines-sdk's Requires-Python <3.11 must be ignored, as `make setup` does.
BASE_ENVIRONMENT = {"PATH": f"{BASE_VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                            "/sbin:/bin",
                    "VIRTUAL_ENV": BASE_VENV, "PIP_IGNORE_REQUIRES_PYTHON": "1"}
HOST_CA_DIR = "/etc/ssl/certs"
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
SERVICE_START_SECONDS = 60
# What podman's own container monitor (conmon) runs with here, measured: a container's ulimits
# above it fail ("error setting rlimit type 6", nproc at 32769).
PODMAN_RLIMITS = {"nofile": 1048576, "nproc": 32768}


def containers_conf(path: str) -> str:
  """Writes podman's settings for these machines (module docstring) to `path`."""
  ulimits = []
  for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
    hard = resource.getrlimit(limit)[1]
    value = PODMAN_RLIMITS[name] if hard == resource.RLIM_INFINITY else min(
        PODMAN_RLIMITS[name], hard)
    ulimits.append(f'"{name}={value}:{value}"')
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(f'[containers]\ndefault_ulimits = [{", ".join(ulimits)}]\n\n'
            '[engine]\nruntime = "runc"\n')
  return path


def podman_environ(work_dir: str = WORK_DIR) -> Dict[str, str]:
  return dict(os.environ, CONTAINERS_CONF=containers_conf(os.path.join(work_dir,
                                                                       "containers.conf")))


def podman(args: List[str], environ: Mapping[str, str], **kwargs) -> subprocess.CompletedProcess:
  if not shutil.which("podman"):
    raise RuntimeError("podman is not installed: run `make container-packages` (as root).")
  return subprocess.run(["podman", *args], env=dict(environ), check=True, **kwargs)


def image_id(name: str, environ: Mapping[str, str]) -> Optional[str]:
  result = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", name],
                          env=dict(environ), capture_output=True, text=True)
  return result.stdout.strip() if result.returncode == 0 else None


def debian_mirror(paths=APT_SOURCES) -> str:
  """The Debian archive that apt's own sources list names (not the security archive)."""
  files = []
  for path in paths:
    if os.path.isdir(path):
      files += [os.path.join(path, name) for name in sorted(os.listdir(path))]
    elif os.path.isfile(path):
      files.append(path)
  for path in files:
    with open(path) as f:
      text = f.read()
    for uri in re.findall(r"^(?:URIs:\s*|deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
      if "security" not in uri:
        return uri
  raise RuntimeError(f"No Debian mirror in {', '.join(paths)}: debootstrap needs one.")


def build_base_image(environ: Mapping[str, str], work_dir: str = WORK_DIR) -> str:
  """The local base (debootstrap's minimal bookworm, BASE_PACKAGES, a venv on PATH), made once;
  returns its image id."""
  existing = image_id(BASE_IMAGE, environ)
  if existing:
    return existing
  os.makedirs(work_dir, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
    rootfs = os.path.join(scratch, "rootfs")
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                    DEBIAN_SUITE, rootfs, debian_mirror()], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["chroot", rootfs, "python3", "-m", "venv", BASE_VENV], check=True)
    changes = [arg for name, value in BASE_ENVIRONMENT.items()
               for arg in ("--change", f"ENV={name}={value}")]
    tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
    podman(["import", *changes, "--change", 'CMD=["/bin/bash"]', "-", BASE_IMAGE], environ,
           stdin=tar.stdout, stdout=subprocess.DEVNULL)
    if tar.wait() != 0:
      raise RuntimeError(f"tar of {rootfs} failed")
  return image_id(BASE_IMAGE, environ)


def dockerfile_instructions(path: str = os.path.join(PROJECT_DIR, "Dockerfile")
                            ) -> List[Tuple[str, ...]]:
  """(instruction, arguments) of each line of the Dockerfile, continuations joined."""
  with open(path) as f:
    text = re.sub(r"\\\n", " ", f.read())
  lines = [line.strip() for line in text.splitlines()]
  return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


def _ignored(relative: str, patterns: List[str]) -> bool:
  return any(fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/")
             for pattern in patterns)


def copied_files(project_dir: str = PROJECT_DIR) -> List[str]:
  """Every file of the build context that the Dockerfile's COPY lines take in."""
  with open(os.path.join(project_dir, ".dockerignore")) as f:
    patterns = [line.strip() for line in f if line.strip() and not line.startswith("#")]
  sources = [source for op, args in dockerfile_instructions(os.path.join(project_dir,
                                                                         "Dockerfile"))
             if op == "COPY" for source in args.split()[:-1]]
  files = []
  for source in sources:
    top = os.path.join(project_dir, source.rstrip("/"))
    walked = ([(os.path.dirname(top), [], [os.path.basename(top)])] if os.path.isfile(top)
              else os.walk(top))
    for root, _, names in walked:
      for name in names:
        relative = os.path.relpath(os.path.join(root, name), project_dir)
        if not _ignored(relative, patterns):
          files.append(relative)
  return sorted(set(files))


def image_tag(base_id: str, project_dir: str = PROJECT_DIR) -> str:
  """The image's name: a hash of the base, the Dockerfile and every file it copies, so an
  unchanged build is found instead of rebuilt."""
  digest = hashlib.sha256(base_id.encode())
  for relative in ["Dockerfile", ".dockerignore"] + copied_files(project_dir):
    with open(os.path.join(project_dir, relative), "rb") as f:
      digest.update(relative.encode() + b"\0" + hashlib.sha256(f.read()).digest())
  return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:16]}"


def build_image(environ: Mapping[str, str], work_dir: str = WORK_DIR
                ) -> Tuple[str, Optional[float]]:
  """The Dockerfile built on the local base: (image name, build seconds; None when an image of
  the same inputs already existed)."""
  base_id = build_base_image(environ, work_dir)
  tag = image_tag(base_id)
  if image_id(tag, environ):
    return tag, None
  start = time.monotonic()
  log_path = os.path.join(work_dir, "build.log")
  with open(log_path, "w") as log:
    result = subprocess.run(
        ["podman", "build", "--network=host", f"--volume={HOST_CA_DIR}:{HOST_CA_DIR}:ro",
         f"--build-arg=BASE_IMAGE={BASE_IMAGE}", f"--tag={tag}", PROJECT_DIR],
        env=dict(environ), stdout=log, stderr=subprocess.STDOUT)
  if result.returncode != 0:
    with open(log_path) as f:
      tail = f.read()[-3000:]
    raise RuntimeError(f"podman build failed (exit {result.returncode}); log: {log_path}\n{tail}")
  return tag, time.monotonic() - start


class PodmanService:
  """`podman system service` answering the Docker API on a unix socket of our own, for as long
  as the context lasts; environ() is what the docker client needs (DOCKER_HOST)."""

  def __init__(self, environ: Mapping[str, str]):
    self.environ_base = dict(environ)
    # A short path of its own: a unix socket's path has at most 107 bytes.
    self.socket_dir = tempfile.mkdtemp(prefix="podman-")
    self.socket = os.path.join(self.socket_dir, "docker.sock")
    self.process: Optional[subprocess.Popen] = None

  def environ(self) -> Dict[str, str]:
    return {"DOCKER_HOST": f"unix://{self.socket}"}

  def __enter__(self) -> "PodmanService":
    import docker
    self.process = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{self.socket}"],
        env=self.environ_base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + SERVICE_START_SECONDS
    while True:
      try:
        client = docker.DockerClient(base_url=self.environ()["DOCKER_HOST"])
        client.ping()
        client.close()
        return self
      except docker.errors.DockerException:
        if self.process.poll() is not None or time.monotonic() > deadline:
          self.__exit__()
          raise RuntimeError(f"podman system service on {self.socket} did not answer "
                             f"within {SERVICE_START_SECONDS} s")
        time.sleep(0.5)

  def __exit__(self, *exc) -> None:
    if self.process is not None and self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(10)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    shutil.rmtree(self.socket_dir, ignore_errors=True)


def main(argv: List[str]) -> int:
  """`make kubeflow-image-local`: builds the image (or finds it) and prints its name."""
  del argv
  environ = podman_environ()
  start = time.monotonic()
  had_base = image_id(BASE_IMAGE, environ) is not None
  build_base_image(environ)
  print(f"base: {BASE_IMAGE} ({'found' if had_base else 'made'} in "
        f"{time.monotonic() - start:.0f} s)", flush=True)
  tag, seconds = build_image(environ)
  print(f"image: {tag} ({'built in %.0f s' % seconds if seconds is not None else 'unchanged'})")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
