"""The image folder's layout, classes and keys, and why each bad file is refused."""
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from components import image_folder, image_sources
from components.splits import split_for_key
from test_support import image_folders, kfp_harness
from trainer_module import image_format
from trainer_module.features import IMAGE_SHAPE


def _files(layout):
  return {key: label for files in layout.files.values() for key, label in files}


def test_class_folders_give_sorted_classes_keys_by_relative_path_and_a_split_by_key(tmp_path):
  written = image_folders.write_image_folder(str(tmp_path), per_class=30)
  layout = image_folder.scan(str(tmp_path), 0.1, 0.3)  # Unequal: a swap of the two shows.
  assert layout.class_names == ("blue sky", "grass", "red_car")
  assert layout.problems == []
  files = _files(layout)
  assert files == {key: layout.class_names.index(name) for key, name in written.items()}
  assert "grass/more/0009.png" in files  # Subfolders of a class folder are read too.
  for split, split_files in layout.files.items():
    assert {split_for_key(key, 0.1, 0.3) for key, _ in split_files} == {split}
  assert len(layout.files["test"]) > len(layout.files["eval"])  # 30% against 10% of 90 files.
  assert layout == image_folder.scan(str(tmp_path), 0.1, 0.3)


def test_fixed_splits_keep_their_files_and_name_missing_empty_and_unknown_classes(tmp_path):
  image_folders.write_image_folder(str(tmp_path), per_class=3, splits=("train", "eval", "test"))
  os.rename(tmp_path / "eval" / "grass", tmp_path / "eval" / "gras")  # Unknown to train/.
  for name in os.listdir(tmp_path / "test" / "red_car"):
    os.remove(tmp_path / "test" / "red_car" / name)  # Empty.
  (tmp_path / "train" / "README.txt").write_text("stray")
  (tmp_path / "train" / ".DS_Store").write_text("dot files are not read")
  layout = image_folder.scan(str(tmp_path), 0.2, 0.2)
  assert layout.class_names == ("blue sky", "grass", "red_car")
  assert {split: sorted(key.split("/")[0] for key, _ in files)
          for split, files in layout.files.items()} == {
              "train": ["train"] * 9, "eval": ["eval"] * 6, "test": ["test"] * 6}
  assert layout.problems == sorted([
      (str(tmp_path / "eval" / "gras"), "class 'gras' is not in train/ (the model could not "
       "learn it); its files are not read"),
      (str(tmp_path / "eval" / "grass"), "missing: class 'grass' is in train/ but not in eval/"),
      (str(tmp_path / "test" / "red_car"), "empty class folder: it holds no image files"),
      (str(tmp_path / "train" / "README.txt"), "is not in a class folder; not read")])


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "is not a directory"),
    (lambda root: os.makedirs(os.path.join(root, "only_class")) or open(
        os.path.join(root, "only_class", "a.png"), "wb").write(image_folders.jpeg()),
     r"has 1 class folder\(s\) with files \['only_class'\]; at least 2 are needed"),
    (lambda root: image_folders.write_image_folder(root, 2, splits=("train", "test")),
     r"has fixed splits \(a train/ folder\) but no eval/"),
], ids=["missing", "one-class", "fixed-without-eval"])
def test_a_folder_that_cannot_be_a_dataset_is_refused_at_once(tmp_path, make, message):
  root = str(tmp_path / "images")
  make(root)
  with pytest.raises(image_folder.ImageFolderError, match=message):
    image_folder.scan(root, 0.2, 0.2)


@pytest.mark.parametrize("kind", image_folders.KINDS, ids=lambda kind: "-".join(kind[:2]))
def test_every_format_and_mode_becomes_a_model_input(kind):
  image_format_name, mode, _ = kind
  colour = (220, 40, 40)
  encoded = image_folders.encode(image_folders.photo(colour, (97, 41), 3), image_format_name,
                                 mode)
  image = image_folder.model_input(encoded)
  assert image.shape == IMAGE_SHAPE and image.dtype == np.uint8
  if mode != "L":  # The colour survives the conversion to RGB and the resize.
    assert np.abs(image.reshape(-1, 3).mean(axis=0) - colour).max() < 60


def test_a_model_sized_png_is_stored_unchanged():
  pixels = np.random.default_rng(0).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
  np.testing.assert_array_equal(
      image_folder.model_input(image_sources.encode_png(pixels)), pixels)


def test_ingest_resizes_with_the_serving_graphs_function():
  photo = image_folders.jpeg((480, 360))
  np.testing.assert_array_equal(image_folder.model_input(photo),
                                image_format.decode_to_model_input(tf.constant(photo)).numpy())


_JPEG = image_folders.jpeg((120, 90))


@pytest.mark.parametrize("data, reason", [
    (b"", r"^empty file \(0 bytes\)$"),
    (b"name,label\nx,1\n", r"^not an image \(expected JPEG, PNG, GIF, BMP\)$"),
    (_JPEG[:len(_JPEG) // 2], r"^cannot be decoded as JPEG \(truncated or corrupted\?\): "
     r"jpeg::Uncompress failed"),
    (image_folders.png_declaring(8000, 6000), r"^declares 8000x6000 pixels, more than "
     r"40,000,000; not decoded$"),
    (image_folders.png_declaring(30000, 30000), r"^declares too many pixels .*; not decoded$"),
    (image_folders.encode(image_folders.photo((1, 2, 3), (20, 20), 0), "TIFF", "RGB"),
     r"^is a TIFF image \(expected JPEG, PNG, GIF, BMP\)$"),
], ids=["zero-bytes", "not-an-image", "truncated-jpeg", "over-the-bound", "pil-bomb", "tiff"])
def test_each_bad_file_is_refused_with_its_reason(tmp_path, data, reason):
  (tmp_path / "cat").mkdir()
  (tmp_path / "cat" / "bad.jpg").write_bytes(data)
  record, bad = image_folder.read_image(str(tmp_path), "cat/bad.jpg", 0)
  assert record is None
  assert bad[0] == str(tmp_path / "cat" / "bad.jpg")
  assert re.search(reason, bad[1]), bad[1]


def test_a_replaced_a_touched_or_a_new_file_changes_the_listing_fingerprint(tmp_path):
  """Each of a file's size and modification time counts, not only its name."""
  written = image_folders.write_image_folder(str(tmp_path), per_class=2)
  path = tmp_path / sorted(written)[0]
  original, stat = path.read_bytes(), os.stat(path)
  times = (stat.st_atime_ns, stat.st_mtime_ns)

  def fingerprint():
    return image_folder.listing_fingerprint(str(tmp_path))

  before = fingerprint()
  assert before == fingerprint()
  path.write_bytes(original + b"\0")  # Another size at the same time: a corrected photo.
  os.utime(path, ns=times)
  assert fingerprint() != before
  path.write_bytes(original)
  os.utime(path, ns=times)
  assert fingerprint() == before  # Path, size and time: nothing else.
  os.utime(path, ns=(times[0], times[1] + 10**9))  # The same size, touched a second later.
  assert fingerprint() != before
  os.utime(path, ns=times)
  (tmp_path / "grass" / "new.jpg").write_bytes(image_folders.jpeg())
  assert fingerprint() != before


def _problems_match(layout, expected):
  """Every problem is one of `expected` ({path: its reason's start}), and each is there."""
  assert sorted(path for path, _ in layout.problems) == sorted(expected)
  for path, reason in layout.problems:
    assert reason.startswith(expected[path]), (path, reason)


def test_a_file_or_class_folder_whose_name_is_not_utf8_is_named_not_read(tmp_path):
  written = image_folders.write_image_folder(str(tmp_path), per_class=3)
  expected = image_folders.add_names_not_utf8(str(tmp_path))
  layout = image_folder.scan(str(tmp_path), 0.2, 0.2)
  _problems_match(layout, expected)
  assert set(_files(layout)) == set(written)
  assert layout.class_names == ("blue sky", "grass", "red_car")


def test_a_dangling_or_self_looping_link_is_named_not_read(tmp_path):
  written = image_folders.write_image_folder(str(tmp_path), per_class=3)
  expected = image_folders.add_broken_links(str(tmp_path))
  layout = image_folder.scan(str(tmp_path), 0.2, 0.2)
  _problems_match(layout, expected)
  assert set(_files(layout)) == set(written)


def test_links_are_never_followed_around_or_out_of_the_folder_and_each_image_is_read_once(
    tmp_path):
  """`blue sky/up -> ..` once made 24 real files 985 keys (dog images labelled cat); a link out
  of the folder is not read, and a link to an image read as itself is not read twice (it could
  land in another split). A link to an image inside the folder that nothing else reads is read
  once, through the link."""
  root = tmp_path / "images"
  written = image_folders.write_image_folder(str(root), per_class=3)
  expected, through_links = image_folders.add_links_around(str(root), str(tmp_path / "other"))
  layout = image_folder.scan(str(root), 0.2, 0.2)
  _problems_match(layout, expected)
  files = _files(layout)
  assert set(files) == set(written) | set(through_links)
  assert all(files[key] == layout.class_names.index(name)
             for key, name in {**written, **through_links}.items())


def test_the_listing_fingerprint_reads_any_name_and_follows_no_link(tmp_path):
  """The driver fingerprints the folder before any image is read: a name that is not UTF-8, a
  dangling or looping link, a loop of folders do not stop it, and re-pointing a link changes
  it."""
  root = tmp_path / "images"
  image_folders.write_image_folder(str(root), per_class=2)
  image_folders.add_names_not_utf8(str(root))
  image_folders.add_broken_links(str(root))
  image_folders.add_links_around(str(root), str(tmp_path / "other"))
  before = image_folder.listing_fingerprint(str(root))
  assert before == image_folder.listing_fingerprint(str(root))
  os.remove(root / "red_car" / "dangling.jpg")
  os.symlink("elsewhere.jpg", root / "red_car" / "dangling.jpg")
  assert image_folder.listing_fingerprint(str(root)) != before



def test_an_s3_folder_that_cannot_be_reached_is_named_so_at_once(monkeypatch):
  """Not 'is not a directory' after tensorflow-io's minutes of retries: the step (on Kubeflow,
  with its pod's credentials) says the folder cannot be reached, and the driver's fingerprint
  too."""
  from test_support.s3_server import free_port
  endpoint = f"http://127.0.0.1:{free_port()}"  # Nothing listens there.
  for name, value in {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "key",
                      "AWS_SECRET_ACCESS_KEY": "secret", "AWS_REGION": "us-east-1"}.items():
    monkeypatch.setenv(name, value)
  message = (rf"image_dir s3://photos/cats cannot be reached: the S3 endpoint {endpoint} does not "
             "answer")
  with pytest.raises(image_folder.ImageFolderError, match=message):
    image_folder.scan("s3://photos/cats", 0.2, 0.2)
  with pytest.raises(image_folder.ImageFolderError, match=message):
    image_folder.listing_fingerprint("s3://photos/cats")


def _layout_on_s3(tmp_path, s3_server, bucket, fixed_splits):
  """A local image folder with hidden files and folders, a nested folder, a stray file and (with
  fixed splits) an empty class folder and one unknown to train/, copied to the bucket (the
  empty folder as the marker object an S3 console makes); returns (local root, s3:// root)."""
  root = tmp_path / "local"
  splits = ("train", "eval", "test") if fixed_splits else ()
  image_folders.write_image_folder(str(root), per_class=10, splits=splits)
  base = root / "train" if fixed_splits else root
  (base / "README.txt").write_text("stray")
  (base / ".DS_Store").write_text("dot files are not read")
  (base / "grass" / ".thumbnails").mkdir()
  (base / "grass" / ".thumbnails" / "0000.png").write_bytes(image_folders.jpeg())
  if fixed_splits:
    os.rename(root / "eval" / "grass", root / "eval" / "gras")
    shutil.rmtree(root / "test" / "red_car")
    (root / "test" / "red_car").mkdir()
  folder = "fixed" if fixed_splits else "by-key"  # The parameters share the test's bucket.
  uri = f"s3://{bucket}/{folder}"
  kfp_harness.upload(s3_server, str(root), uri)
  if fixed_splits:
    s3_server.client().put_object(Bucket=bucket, Key=f"{folder}/test/red_car/", Body=b"")
  return str(root), uri


@pytest.mark.parametrize("fixed_splits", [False, True], ids=["split-by-key", "fixed-splits"])
def test_an_s3_folder_is_scanned_as_the_same_folder_on_disk(tmp_path, s3_server, s3,
                                                             fixed_splits):
  local, uri = _layout_on_s3(tmp_path, s3_server, s3[1], fixed_splits)
  on_disk, on_s3 = image_folder.scan(local, 0.2, 0.2), image_folder.scan(uri, 0.2, 0.2)
  assert on_s3.class_names == on_disk.class_names == ("blue sky", "grass", "red_car")
  assert on_s3.files == on_disk.files
  assert any("/grass/more/" in "/" + key for key in _files(on_s3))  # A nested folder's files.
  assert on_s3.problems == [(path.replace(local, uri), reason)
                            for path, reason in on_disk.problems]
  assert len(on_s3.problems) == (4 if fixed_splits else 1)


def test_an_s3_folder_is_listed_in_requests_that_do_not_grow_with_its_files(tmp_path, s3_server,
                                                                            s3, monkeypatch):
  """One listing per 1,000 keys, not a request per name: scanning and fingerprinting a folder
  of ten times the images asks the store as often."""
  from storage import object_storage
  calls = []
  for name in ("isdir", "listdir", "stat", "walk", "exists", "glob"):
    monkeypatch.setattr(tf.io.gfile, name, lambda *args, _call=getattr(tf.io.gfile, name),
                        _name=name: calls.append(_name) or _call(*args))
  client = object_storage.s3_client(object_storage.S3Settings.from_environ())
  count_call = lambda **_: calls.append("s3 call")  # noqa: E731  (A retry is not a call.)
  client.meta.events.register("before-call.s3", count_call)
  try:
    made = {}
    for per_class in (2, 20):
      image_folders.write_image_folder(str(tmp_path / str(per_class)), per_class)
      uri = f"s3://{s3[1]}/{per_class}"
      kfp_harness.upload(s3_server, str(tmp_path / str(per_class)), uri)
      calls.clear()
      assert len(_files(image_folder.scan(uri, 0.2, 0.2))) == 3 * per_class
      image_folder.listing_fingerprint(uri)
      made[per_class] = sorted(calls)
  finally:
    client.meta.events.unregister("before-call.s3", count_call)
  assert made[2] == made[20] and made[2].count("s3 call") == 2


def test_an_s3_folders_fingerprint_changes_with_a_replaced_or_a_new_file(tmp_path, s3_server, s3):
  image_folders.write_image_folder(str(tmp_path), per_class=2)
  uri = f"s3://{s3[1]}/photos"
  kfp_harness.upload(s3_server, str(tmp_path), uri)
  client, key = s3_server.client(), "photos/grass/0000.jpg"
  original = client.get_object(Bucket=s3[1], Key=key)["Body"].read()
  before = image_folder.listing_fingerprint(uri)
  assert image_folder.listing_fingerprint(uri) == before
  client.put_object(Bucket=s3[1], Key=key, Body=bytes(reversed(original)))  # The same size.
  replaced = image_folder.listing_fingerprint(uri)
  assert replaced != before
  client.put_object(Bucket=s3[1], Key="photos/grass/new.jpg", Body=original)
  assert image_folder.listing_fingerprint(uri) not in (before, replaced)


@pytest.mark.parametrize("first, second", [
    ("caf\u00e9", "cafe\u0301"),  # é composed (NFC) and decomposed (NFD): they look the same.
    ("Cat", "cat"), ("cat", "cat "), ("ｃａｔ", "cat")],
    ids=["normalisation", "case", "trailing-space", "full-width"])
def test_class_folders_that_differ_only_by_normalisation_case_or_spaces_are_refused(
    tmp_path, first, second):
  """They would be two classes of one kind of image, the model told to keep them apart."""
  for name in (first, second, "dog"):
    os.makedirs(tmp_path / name)
    (tmp_path / name / "a.jpg").write_bytes(image_folders.jpeg())
  with pytest.raises(image_folder.ImageFolderError) as raised:
    image_folder.scan(str(tmp_path), 0.2, 0.2)
  message = str(raised.value)
  assert message.startswith(f"image_dir {tmp_path}: class folders ")
  for name in (first, second):
    assert f"{tmp_path / name} ({ascii(name)})" in message
  assert ("differ only by Unicode normalisation, case or spaces at their ends: rename or merge "
          "them") in message


@pytest.mark.parametrize("splits, extra, named", [
    (("eval", "test"), None, "eval/, test/"),
    (("test",), None, "test/"),
    (("train", "eval", "test"), "cat", "train/, eval/, test/ beside cat/")])
def test_a_split_layout_without_train_or_with_class_folders_beside_it_is_refused(
    tmp_path, splits, extra, named):
  """Its split folders would otherwise be classes named eval and test."""
  image_folders.write_image_folder(str(tmp_path), per_class=2, splits=splits)
  if extra:
    os.makedirs(tmp_path / extra)
    (tmp_path / extra / "a.jpg").write_bytes(image_folders.jpeg())
  with pytest.raises(image_folder.ImageFolderError,
                     match=rf"image_dir {tmp_path} holds {re.escape(named)}"):
    image_folder.scan(str(tmp_path), 0.2, 0.2)
