"""`make kubeflow-local-docker`: the project's image built here (test_support/container_image.py) and
the compiled tiny pipeline run in its containers by `python -m kubeflow local-run
--runner=docker`, twice, on a local S3 server: run 1 pushes a model, run 2 (two training steps)
gets that model as its Evaluator's baseline. The containers reach the server on the host's
loopback (local_run.ContainerTaskHandler uses the host's network) and get its settings the
way local-run gives every container the object-storage environment.
"""
import os
import subprocess
import sys
import time
from typing import Dict, List, Mapping

from test_support import container_image
from test_support import kfp_harness

PIPELINE_NAME = "wrn-kfp-docker"  # Its own serving directory, apart from the other local runs.
SECOND_RUN_FLAGS = ("--train_steps=2",)  # A degraded candidate, refused against run 1's model.


def compile_for_image(server, package_dir: str, image: str, flags: List[str]):
  """The tiny config compiled for kfp on `server`'s bucket, every task in `image`; `flags`
  replace its settings."""
  from configs.flags import over_defaults
  from test_support.tiny_config import SMALL_MODEL
  # --force_retrain: the second run trains on the data the first run's model was trained on.
  return kfp_harness.compile_for_s3(server, package_dir, over_defaults(
      SMALL_MODEL + [f"--image={image}", f"--pipeline_name={PIPELINE_NAME}",
                     "--force_retrain=true"], flags))


def local_run_command(spec_path: str, pipeline_root: str, *flags: str) -> List[str]:
  return ["local-run", f"--package={spec_path}", "--runner=docker",
          f"--pipeline_root={pipeline_root}", *flags]


def task_environ(server, service) -> Dict[str, str]:
  """What local-run needs: the S3 server's settings (the Secret a pod would get, passed on to
  each container) and the podman socket."""
  return {**server.environ(), **service.environ()}


def _local_run(argv: List[str], environ: Mapping[str, str]) -> float:
  start = time.monotonic()
  result = subprocess.run([sys.executable, "-m", "kubeflow", *argv], cwd=kfp_harness.PROJECT_DIR,
                          env=dict(os.environ, **environ))
  if result.returncode != 0:
    raise kfp_harness.TaskFailed(f"python -m kubeflow local-run exited with {result.returncode}")
  return time.monotonic() - start


def main(argv: List[str]) -> int:
  from test_support.s3_server import S3Server
  workdir = os.path.abspath(os.path.join("outputs", "kubeflow-local-docker"))
  environ = container_image.podman_environ()
  start = time.monotonic()
  image, build_seconds = container_image.build_image(environ)
  print(f"image: {image} ({'built in %.0f s' % build_seconds if build_seconds else 'unchanged'})",
        flush=True)
  with S3Server() as server, container_image.PodmanService(environ) as service:
    config, compiled = compile_for_image(server, os.path.join(workdir, "package"), image, argv)
    root = os.path.join(workdir, "pipeline_root")
    try:
      first = _local_run(local_run_command(compiled.spec_path, root), task_environ(server, service))
      first_versions = kfp_harness.pushed_versions(server, config.runner.serving_model_dir)
      second = _local_run(local_run_command(compiled.spec_path, root, *SECOND_RUN_FLAGS),
                          task_environ(server, service))
    except kfp_harness.TaskFailed as error:
      print(f"error: {error}", file=sys.stderr)
      return 1
    versions = kfp_harness.pushed_versions(server, config.runner.serving_model_dir)
  print(f"run 1: {first:.0f} s, pushed {first_versions}; run 2 ({' '.join(SECOND_RUN_FLAGS)}, "
        f"baseline: run 1's model): {second:.0f} s, pushed versions now {versions}; "
        f"all with the build: {time.monotonic() - start:.0f} s")
  return 0 if len(first_versions) == 1 and versions == first_versions else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
