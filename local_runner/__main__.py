"""`python -m local_runner [--flag=value ...]`: runs the pipeline locally with LocalDagRunner."""
import sys

from local_runner.runner import main

if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
