"""Reading a `--help` text the way a user does: each flag and the help printed under it."""
import re
from typing import Dict


def printed_helps(text: str) -> Dict[str, str]:
  """{flag: its help} from a --help text's `  --name  (default: ...)` lines and the indented
  lines under each; a flag listed twice fails."""
  helps, name = {}, None
  for line in text.splitlines():
    flag = re.match(r"  --(\S+)  \(default: ", line)
    if flag:
      name = flag.group(1)
      assert name not in helps, f"--{name} listed twice"
      helps[name] = ""
    elif name and line.startswith("      "):
      helps[name] = f"{helps[name]} {line.strip()}".lstrip()
    else:
      name = None
  return helps
