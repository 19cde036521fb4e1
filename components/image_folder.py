"""A folder of labelled images as the pipeline's input (--dataset=image_dir): lists it, names
every bad file, and reads each image as serving would (docs/pipeline.md, "Your own images").
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import os
import posixpath
import re
import unicodedata
from typing import Dict, List, Optional, Tuple

import numpy as np

from components import image_sources
from components.splits import SPLITS, split_for_key
from storage import object_storage
from trainer_module import image_format

FORMATS = ("JPEG", "PNG", "GIF", "BMP")
_TF_DECODED = ("JPEG", "PNG")  # As serving decodes them; TF ignores a BMP's palette.
MIN_CLASSES = 2

BadFile = Tuple[str, str]  # (path, reason)


class ImageFolderError(ValueError):
  """The image folder cannot be read as labelled images; names every bad file or folder."""


@dataclasses.dataclass(frozen=True)
class FolderLayout:
  """What `scan` found: the classes, each split's (key, label) files, and the bad folders."""
  image_dir: str
  class_names: Tuple[str, ...]
  files: Dict[str, List[Tuple[str, int]]]
  problems: List[BadFile]


def _visible(names) -> List[str]:
  return sorted(name.rstrip("/") for name in names if not name.startswith("."))


def _is_local(path: str) -> bool:
  """A path of this machine's file system, where names are bytes and links exist (object
  stores have neither)."""
  return "://" not in path


def shown(name: str) -> str:
  """A local name as it can be printed and recorded: bytes that are not UTF-8 (Python reads
  them as surrogates) written as \\xNN."""
  return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _refuse_lookalikes(image_dir: str, root: str, class_names: Tuple[str, ...]) -> None:
  """Class folders whose names differ only by Unicode normalisation (é composed or not, a
  full-width letter), case or spaces at their ends hold one kind of image: as two classes the
  model would be trained to tell them apart. Raises ImageFolderError naming each pair."""
  alike: Dict[str, List[str]] = {}
  for name in class_names:
    alike.setdefault(unicodedata.normalize("NFKC", name).casefold().strip(), []).append(name)
  groups = [names for names in alike.values() if len(names) > 1]
  if groups:
    base = os.path.join(image_dir, root) if root else image_dir
    raise ImageFolderError(f"image_dir {image_dir}: " + "; ".join(
        "class folders " + " and ".join(f"{os.path.join(base, name)} ({ascii(name)})"
                                        for name in names) for names in groups) +
        " differ only by Unicode normalisation, case or spaces at their ends: rename or merge "
        "them.")


def _check_reachable(image_dir: str) -> None:
  """An s3:// folder is asked once, quickly, whether it can be read with this process's
  credentials (object_storage.s3_folder_problem): tensorflow-io retries an unreachable
  endpoint for minutes, then calls the folder not a directory."""
  problem = (object_storage.s3_folder_problem(image_dir) if image_dir.startswith("s3://")
             else None)
  if problem:
    raise ImageFolderError(f"image_dir {image_dir} {problem}.")


def _local_listing(directory: str) -> Tuple[List[str], List[str], List[BadFile]]:
  """(folder names, file names, problems) directly in a local directory, dot names left out.
  A name that is not UTF-8 cannot be a key, and a link to a folder is never followed (a link
  to `..` would read the folder again and again): both are problems. A link to anything else
  is listed as a file; scan decides whether it is read."""
  folders, files, problems = [], [], []
  for name in _visible(os.listdir(directory)):
    path = os.path.join(directory, name)
    if shown(name) != name:
      problems.append((shown(path), "its name is not valid UTF-8, so it cannot be a key; "
                       "rename it (not read)"))
    elif os.path.islink(path) and os.path.isdir(path):
      problems.append((path, f"is a link to a folder ({os.readlink(path)}); links to folders "
                       "are not followed"))
    else:
      (folders if os.path.isdir(path) and not os.path.islink(path) else files).append(name)
  return folders, files, problems


def _subfolders(path: str) -> Tuple[List[str], List[str], List[BadFile]]:
  """(folder names, file names, problems) directly in path, dot files left out."""
  import tensorflow as tf
  if _is_local(path):
    return _local_listing(path)
  folders, files = [], []
  for name in _visible(tf.io.gfile.listdir(path)):
    (folders if tf.io.gfile.isdir(os.path.join(path, name)) else files).append(name)
  return folders, files, []


def _class_files(class_dir: str) -> Tuple[List[str], List[BadFile]]:
  """The files under a class folder (subfolders too), as paths relative to it, sorted, and
  the problems found on the way."""
  import tensorflow as tf
  found, problems = [], []
  if _is_local(class_dir):
    pending = [""]
    while pending:
      relative = pending.pop()
      folders, files, bad = _local_listing(os.path.join(class_dir, relative))
      problems += bad
      found += [posixpath.join(relative, name) for name in files]
      pending += [posixpath.join(relative, name) for name in folders]
    return sorted(found), problems
  for directory, subdirs, files in tf.io.gfile.walk(class_dir):
    subdirs[:] = _visible(subdirs)
    relative = directory[len(class_dir):].strip("/").replace("\\", "/")
    found += [posixpath.join(relative, name) if relative else name for name in _visible(files)]
  return sorted(found), problems


class _ListedFolder:
  """An s3:// folder as one listing of every key under it shows it: the folders and files that
  tf.io.gfile would find name by name, each a request to the store (what a folder of tens of
  thousands of images cannot afford twice a run)."""

  def __init__(self, image_dir: str, objects: List[object_storage.StoredObject]):
    self._root = image_dir.rstrip("/")
    self._folders = {""}
    self._files: Dict[str, List[str]] = {}
    for stored in objects:
      parts = [part for part in stored.key.split("/") if part]
      folders = parts if stored.key.endswith("/") else parts[:-1]  # A marker names a folder.
      self._folders.update("/".join(folders[:depth]) for depth in range(1, len(folders) + 1))
      if not stored.key.endswith("/") and parts:
        self._files.setdefault("/".join(folders), []).append(parts[-1])

  def _relative(self, path: str) -> str:
    return path.rstrip("/")[len(self._root):].strip("/")

  def isdir(self, path: str) -> bool:
    return self._relative(path) in self._folders

  def subfolders(self, path: str) -> Tuple[List[str], List[str], List[BadFile]]:
    """As _subfolders: (folder names, file names, no problems) directly in path."""
    relative = self._relative(path)
    inside = relative + "/" if relative else ""
    folders = [folder[len(inside):] for folder in self._folders
               if folder.startswith(inside) and folder != relative and
               "/" not in folder[len(inside):]]
    return _visible(folders), _visible(self._files.get(relative, [])), []

  def class_files(self, class_dir: str) -> Tuple[List[str], List[BadFile]]:
    """As _class_files: the files under class_dir, relative to it, dot names left out."""
    relative = self._relative(class_dir)
    inside = relative + "/"
    found = []
    for folder, names in self._files.items():
      if folder == relative or folder.startswith(inside):
        below = folder[len(inside):] if folder != relative else ""
        if not any(part.startswith(".") for part in below.split("/") if part):
          found += [posixpath.join(below, name) if below else name for name in _visible(names)]
    return sorted(found), []


def _link_problem(path: str, real_root: str) -> Optional[str]:
  """Why the link at `path` is not read, or None when it leads to a file inside the folder."""
  try:
    os.stat(path)
  except OSError as error:
    if error.errno == errno.ELOOP:
      return "is a link that loops back to itself (too many levels of links); not read"
    return f"is a link to {os.readlink(path)}, which does not exist (a dangling link); not read"
  target = os.path.realpath(path)
  if os.path.commonpath([real_root, target]) != real_root:
    return (f"is a link out of the image folder (to {target}); links are not followed out of "
            "it: copy the file in")
  return None


def _without_repeated_links(image_dir: str, found: Dict[Tuple[str, str], List[str]]
                            ) -> Tuple[Dict[Tuple[str, str], List[str]], List[BadFile]]:
  """The listed files without the links that cannot or need not be read: a dangling or
  looping link, a link out of the folder, and a link to a file that is read already (as itself
  or through an earlier link by key): each file inside the folder gives one example, so no
  image is in two splits."""
  real_root = os.path.realpath(image_dir)
  paths = {(key, relative): os.path.join(image_dir, *[part for part in key if part], relative)
           for key, files in found.items() for relative in files}
  read = {os.path.realpath(path) for path in paths.values() if not os.path.islink(path)}
  kept, problems = {key: [] for key in found}, []
  for (key, relative), path in sorted(paths.items()):
    if os.path.islink(path):
      problem = _link_problem(path, real_root)
      target = os.path.realpath(path)
      if problem is None and target in read:
        problem = (f"is a link to {os.path.relpath(target, real_root)}, which is read already; "
                   "an image is read once")
      if problem:
        problems.append((path, problem))
        continue
      read.add(target)
    kept[key].append(relative)
  return {key: files for key, files in kept.items() if files}, problems


def scan(image_dir: str, eval_fraction: float, test_fraction: float) -> FolderLayout:
  """Lists the folder (names only: no image is read). Raises ImageFolderError when it cannot
  be a dataset at all (missing, no classes, a fixed split missing)."""
  import tensorflow as tf
  _check_reachable(image_dir)  # On s3://, refuses a folder with nothing under it.
  listed = (_ListedFolder(image_dir, object_storage.list_s3_folder(image_dir))
            if image_dir.startswith("s3://") else None)
  subfolders = listed.subfolders if listed else _subfolders
  class_files = listed.class_files if listed else _class_files
  isdir = listed.isdir if listed else tf.io.gfile.isdir
  if not isdir(image_dir):
    raise ImageFolderError(f"image_dir {image_dir} is not a directory.")
  problems: List[BadFile] = []
  top, _, _ = subfolders(image_dir)
  splits = [name for name in SPLITS if name in top]
  if splits and ("train" not in splits or len(splits) < len(top)):
    others = [name for name in top if name not in splits]
    raise ImageFolderError(
        f"image_dir {image_dir} holds {', '.join(name + '/' for name in splits)}" +
        (f" beside {', '.join(name + '/' for name in others)}" if others else " but no train/") +
        ": give train/, eval/ and test/, each with the class folders, or only class folders "
        "(split by key); a class may not be named like a split.")
  if splits:  # DIR/{train,eval,test}/<class>/ rather than DIR/<class>/.
    missing = [split for split in SPLITS if split not in top]
    if missing:
      raise ImageFolderError(
          f"image_dir {image_dir} has fixed splits (a train/ folder) but no "
          f"{', '.join(s + '/' for s in missing)}: give train/, eval/ and test/, each with "
          "the class folders, or only class folders (split by key).")
    split_roots = {split: split for split in SPLITS}
  else:
    split_roots = {None: ""}
  found = {}  # (split root, class) -> files
  for root in split_roots.values():
    base = os.path.join(image_dir, root) if root else image_dir
    classes, stray, bad = subfolders(base)
    problems += bad + [(os.path.join(base, name), "is not in a class folder; not read")
                       for name in stray]
    for name in classes:
      files, bad = class_files(os.path.join(base, name))
      problems += bad
      if files:
        found[(root, name)] = files
      else:
        problems.append((os.path.join(base, name),
                         "empty class folder: it holds no image files"))
  if _is_local(image_dir):
    found, bad = _without_repeated_links(image_dir, found)
    problems += bad
  train_root = split_roots.get("train", "")
  class_names = tuple(sorted({name for root, name in found if root == train_root}))
  _refuse_lookalikes(image_dir, train_root, class_names)
  if len(class_names) < MIN_CLASSES:
    raise ImageFolderError(
        f"image_dir {image_dir} has {len(class_names)} class folder(s) with files "
        f"{list(class_names)}; at least {MIN_CLASSES} are needed ("
        f"{'train/' if train_root else ''}<class name>/<image files>).")
  label = {name: index for index, name in enumerate(class_names)}
  files = {split: [] for split in SPLITS}
  for split, root in split_roots.items():
    if root:
      for name in class_names:
        if not isdir(os.path.join(image_dir, root, name)):
          problems.append((os.path.join(image_dir, root, name),
                           f"missing: class '{name}' is in train/ but not in {root}/"))
    for (found_root, name), class_files in found.items():
      if found_root != root:
        continue
      if name not in label:
        problems.append((os.path.join(image_dir, root, name), f"class '{name}' is not in train/ "
                         "(the model could not learn it); its files are not read"))
        continue
      for relative in class_files:
        key = posixpath.join(*[part for part in (root, name, relative) if part])
        target = split or split_for_key(key, eval_fraction, test_fraction)
        files[target].append((key, label[name]))
  return FolderLayout(image_dir, class_names, files, sorted(problems))


def listing_fingerprint(image_dir: str) -> str:
  """A hash of every file's relative path, size and modification time under image_dir (of a
  link, where it points; on s3://, with its entity tag, from one listing), whatever the names
  hold: what decides whether a cached ExampleGen result still holds (as TFX's file-based
  ExampleGens do)."""
  import tensorflow as tf
  _check_reachable(image_dir)
  digest = hashlib.sha256()
  if _is_local(image_dir):  # Links are entries, never followed; any name is hashed.
    for directory, subdirs, files in os.walk(image_dir):
      subdirs.sort()
      for name in sorted(files) + sorted(name for name in subdirs
                                         if os.path.islink(os.path.join(directory, name))):
        path = os.path.join(directory, name)
        stat = os.lstat(path)
        digest.update(json.dumps(
            [directory[len(image_dir):], name, "link", os.readlink(path)]
            if os.path.islink(path) else
            [directory[len(image_dir):], name, stat.st_size, stat.st_mtime_ns]).encode())
    return f"image_dir:{digest.hexdigest()}"
  if image_dir.startswith("s3://"):
    for stored in sorted(object_storage.list_s3_folder(image_dir), key=lambda o: o.key):
      digest.update(json.dumps(dataclasses.astuple(stored)).encode())
    return f"image_dir:{digest.hexdigest()}"
  for directory, subdirs, files in tf.io.gfile.walk(image_dir):
    subdirs.sort()
    for name in sorted(files):
      stat = tf.io.gfile.stat(os.path.join(directory, name))
      digest.update(json.dumps([directory[len(image_dir):], name, stat.length,
                                stat.mtime_nsec]).encode())
  return f"image_dir:{digest.hexdigest()}"


class BadImage(ValueError):
  """Why one file is not a usable image."""


_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\].*$|\s*name:\s*$")


def model_input(data: bytes) -> np.ndarray:
  """An image file's bytes -> uint8 IMAGE_SHAPE, or BadImage saying why not. The declared size
  is checked before decoding."""
  import tensorflow as tf
  from PIL import Image, UnidentifiedImageError
  if not data:
    raise BadImage("empty file (0 bytes)")
  try:
    image = Image.open(io.BytesIO(data))  # Reads the header only.
  except Image.DecompressionBombError as error:
    raise BadImage(f"declares too many pixels ({error}); not decoded") from None
  except UnidentifiedImageError:
    raise BadImage(f"not an image (expected {', '.join(FORMATS)})") from None
  except (OSError, SyntaxError, ValueError) as error:  # A recognised format, a broken header.
    raise BadImage(f"not a readable image ({error}; expected {', '.join(FORMATS)})") from None
  with image:
    if image.format not in FORMATS:
      raise BadImage(f"is a {image.format} image (expected {', '.join(FORMATS)})")
    width, height = image.size
    if width * height > image_format.MAX_DECLARED_PIXELS:
      raise BadImage(f"declares {width}x{height} pixels, more than "
                     f"{image_format.MAX_DECLARED_PIXELS:,}; not decoded")
    try:
      if image.format in _TF_DECODED:
        return image_format.decode_to_model_input(tf.constant(data)).numpy()
      rgb = np.asarray(image.convert("RGB"))  # A GIF's first frame; a BMP's palette applied.
      return image_format.resize_to_model_input(tf.constant(rgb)).numpy()
    except tf.errors.OpError as error:
      raise BadImage(f"cannot be decoded as {image.format} (truncated or corrupted?): "
                     f"{_TF_NOISE.sub('', error.message).strip()}") from None
    except (OSError, SyntaxError, ValueError) as error:
      raise BadImage(f"cannot be decoded as {image.format} (truncated or corrupted?): "
                     f"{error}") from None


def read_image(image_dir: str, key: str, label: int
               ) -> Tuple[Optional[image_sources.Record], Optional[BadFile]]:
  """(the (key, png, label) record of the file `key` under image_dir, None), or (None, the
  BadFile it is)."""
  import tensorflow as tf
  path = os.path.join(image_dir, *key.split("/"))
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      data = f.read()
    return (key, image_sources.encode_png(model_input(data)), label), None
  except BadImage as error:
    return None, (path, str(error))
  except (tf.errors.OpError, OSError) as error:
    return None, (path, f"cannot be read: {getattr(error, 'message', error)}")


def describe(bad_files: List[BadFile]) -> str:
  return "\n".join(f"  - {path}: {reason}" for path, reason in bad_files)
