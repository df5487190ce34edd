"""Update streams survive encode/decode exactly; foreign or damaged blobs are refused."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpu.io.records import DELETE_EDGE, INSERT_EDGE, NO_TIME, UpdateStream
from storage.codec import MAGIC, MAGIC_TIMED, decode_updates, encode_updates
from storage.errors import StorageError
from tests.storage.builders import assert_same_stream, updates_for


def test_round_trip_is_exact_including_extreme_values():
    stream = updates_for(7, n=500)
    decoded = decode_updates(encode_updates(stream), "batch 7")
    assert_same_stream(decoded, stream)
    assert decoded.source == "batch 7"
    assert decoded.a.max() == 2**63 - 1 and decoded.label.max() == 2**31 - 1
    assert (decoded.label == -1).any()


def test_lines_are_renumbered_from_one():
    sliced = updates_for(3, n=10).slice(4, 9)
    assert sliced.line[0] == 5
    decoded = decode_updates(encode_updates(sliced), "slice")
    np.testing.assert_array_equal(decoded.line, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(decoded.a, sliced.a)


def test_empty_stream_round_trips_to_just_the_header():
    blob = encode_updates(UpdateStream.empty())
    assert blob == MAGIC
    decoded = decode_updates(blob, "empty")
    assert len(decoded) == 0
    assert decoded.kind.dtype == np.int8 and decoded.a.dtype == np.int64


def test_records_are_packed_little_endian():
    stream = UpdateStream.from_records([(INSERT_EDGE, 1, 2**40, 9)])
    assert encode_updates(stream) == MAGIC + struct.pack("<bqqi", INSERT_EDGE, 1, 2**40, 9)


def test_decoded_arrays_are_writable_copies():
    blob = encode_updates(updates_for(1))
    decoded = decode_updates(blob, "x")
    decoded.a[0] = 0  # a view into the immutable blob would refuse this
    assert decode_updates(blob, "x").a[0] == 2**63 - 1


@pytest.mark.parametrize(
    "blob",
    [b"", b"MSU", b"MSU\x03" + bytes(21), b"PK\x03\x04" + bytes(21)],
    ids=["empty", "short-header", "newer-version", "foreign"],
)
def test_bad_magic_is_refused(blob):
    with pytest.raises(StorageError, match="bad magic"):
        decode_updates(blob, "batch 3")


def test_truncated_record_is_refused():
    blob = encode_updates(updates_for(2, n=3))
    with pytest.raises(StorageError, match="whole number"):
        decode_updates(blob[:-1], "batch 2")


def test_timed_records_round_trip_with_their_times_and_untimed_ones_as_before():
    timed = UpdateStream.from_records([(INSERT_EDGE, 1, 2, 0, 2**62), (INSERT_EDGE, 2, 3, 1, None),
                                       (DELETE_EDGE, 1, 3, -1, None),
                                       (INSERT_EDGE, 3, 4, 0, -5)])
    blob = encode_updates(timed)
    assert blob[:len(MAGIC_TIMED)] == MAGIC_TIMED
    assert blob[len(MAGIC_TIMED):][:29] == struct.pack("<bqqiq", INSERT_EDGE, 1, 2, 0, 2**62)
    decoded = decode_updates(blob, "timed")
    assert_same_stream(decoded, timed)
    assert decoded.time.tolist() == [2**62, NO_TIME, NO_TIME, -5]
    untimed = UpdateStream.from_records([(INSERT_EDGE, 1, 2, 0, None)])
    assert untimed.time is None and encode_updates(untimed)[:len(MAGIC)] == MAGIC
    assert decode_updates(encode_updates(untimed), "untimed").time is None


def test_a_truncated_timed_record_is_refused():
    blob = encode_updates(UpdateStream.from_records([(INSERT_EDGE, 1, 2, 0, 7)] * 2))
    with pytest.raises(StorageError, match="29-byte records"):
        decode_updates(blob[:-1], "batch 4")
