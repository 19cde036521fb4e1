"""A damaged input TFRecord file is found and named with the byte offset of the bad record."""
import tensorflow as tf

from components import tfrecord_check


def _write(path, records):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for record in records:
      writer.write(record)


def test_intact_files_have_no_problem(tmp_path):
  (tmp_path / "train").mkdir()
  _write(tmp_path / "train" / "a.tfrecord", [b"x" * 10, b"y" * 20])
  assert tfrecord_check.record_problem(str(tmp_path / "train" / "a.tfrecord")) is None
  assert tfrecord_check.corrupted_files(str(tmp_path)) == []


def test_a_truncated_file_is_named_with_the_offset_of_its_last_record(tmp_path):
  (tmp_path / "train").mkdir()
  (tmp_path / "eval").mkdir()
  damaged = tmp_path / "train" / "b.tfrecord"
  _write(damaged, [b"x" * 10, b"y" * 20])  # Records of 16 + 10 and 16 + 20 bytes.
  damaged.write_bytes(damaged.read_bytes()[:-5])
  _write(tmp_path / "eval" / "c.tfrecord", [b"z"])
  assert tfrecord_check.corrupted_files(str(tmp_path)) == [
      f"{damaged}: truncated record at byte offset 26 (after 1 good records)"]


def test_a_flipped_byte_is_a_corrupted_record(tmp_path):
  damaged = tmp_path / "c.tfrecord"
  _write(damaged, [b"x" * 10, b"y" * 20])
  data = bytearray(damaged.read_bytes())
  data[30] ^= 0xFF  # Inside the second record's data: its CRC no longer matches.
  damaged.write_bytes(bytes(data))
  assert "corrupted record at byte offset 26" in tfrecord_check.record_problem(str(damaged))


def test_beams_reader_errors_are_recognised_as_damaged_input():
  assert tfrecord_check.looks_like_corrupted_input(
      "ValueError: Not a valid TFRecord. Fewer than 12 bytes: b'\\x05'")
  assert not tfrecord_check.looks_like_corrupted_input("ValueError: label out of range")
