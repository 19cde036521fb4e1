"""What every bench script's command line shares."""
import argparse


def script_parser(doc: str) -> argparse.ArgumentParser:
  """A parser whose description is the script's docstring's first paragraph: whole sentences,
  its examples and details left to the file."""
  return argparse.ArgumentParser(description=doc.split("\n\n")[0])
