"""`python -m kubeflow compile|upload|run|schedule|local-run ...` (see kubeflow/cli.py,
docs/kubeflow.md)."""
import sys

from kubeflow.cli import main

if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
