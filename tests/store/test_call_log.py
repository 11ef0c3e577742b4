"""The call log: durable, chained, shared flushes; a torn tail is cut, any other damage stops."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from engram_memory.contract.exceptions import StoreCorrupt
from engram_memory.store.call_log import GENESIS_CHAIN, SegmentLog, _frame, chain_after
from engram_memory.store.call_log_reader import records_after

KEY = bytes(range(32))


def _records(n: int, size: int = 300) -> list[bytes]:
    return [f"call-{i:06d}:".encode() + b"x" * size + b"}" for i in range(n)]


def _open(path: Path, **kwargs: int) -> SegmentLog:
    return SegmentLog(path, KEY, **kwargs)


def test_appended_records_read_back_in_order_after_a_restart(tmp_path: Path) -> None:
    log = _open(tmp_path)
    assert log.durable_head().sequence == 0
    assert log.append(_records(3)) == 3
    assert log.append(_records(1)) == 4
    log.close()

    again = _open(tmp_path)
    assert [seq for seq, _ in again.read_from(1)] == [1, 2, 3, 4]
    assert [payload for _, payload in again.read_from(4)] == _records(1)
    assert again.durable_head().sequence == 4
    assert again.append(_records(1)) == 5
    again.close()


def test_the_head_chain_binds_every_record_with_the_key(tmp_path: Path) -> None:
    log = _open(tmp_path)
    records = _records(3)
    log.append(records)
    chain = GENESIS_CHAIN
    for sequence, payload in enumerate(records, start=1):
        chain = chain_after(KEY, chain, sequence, payload)
    assert log.durable_head().chain == chain
    log.close()
    with pytest.raises(StoreCorrupt):  # the same bytes under another key do not verify
        SegmentLog(tmp_path, bytes(32))


def test_concurrent_appenders_share_flushes_and_get_distinct_contiguous_positions(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    positions: list[int] = []
    guard = threading.Lock()
    start = threading.Barrier(16)

    def worker(index: int) -> None:
        start.wait()
        for round_ in range(25):
            position = log.append([f"w{index}-r{round_}".encode()])
            with guard:
                positions.append(position)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(positions) == list(range(1, 401))
    assert log.flushes < 400  # some calls rode on another's flush
    payloads = [payload for _, payload in log.read_from(1)]
    assert sorted(payloads) == sorted(f"w{i}-r{r}".encode() for i in range(16) for r in range(25))
    log.close()


def test_a_record_torn_by_a_crash_is_cut_at_start_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _open(tmp_path)
    log.append(_records(2))
    (segment,) = log.segment_paths()
    log.close()
    whole = segment.read_bytes()
    # A third record that was being written when the process died: its header and half of it.
    third = _open(tmp_path / "scratch")
    third.append(_records(3))
    frame_3 = (third.segment_paths()[0].read_bytes())[len(whole) :]
    third.close()
    segment.write_bytes(whole + frame_3[: len(frame_3) // 2])

    with caplog.at_level(logging.WARNING, logger="engram_memory.store"):
        reopened = _open(tmp_path)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert reopened.durable_head().sequence == 2
    assert segment.read_bytes() == whole
    assert reopened.append(_records(1)) == 3
    reopened.close()


def test_zeros_left_after_the_last_record_are_cut(tmp_path: Path) -> None:
    log = _open(tmp_path)
    log.append(_records(2))
    (segment,) = log.segment_paths()
    log.close()
    with open(segment, "ab") as handle:
        handle.write(b"\0" * 4096)
    assert _open(tmp_path).durable_head().sequence == 2


@pytest.mark.parametrize("record", [1, 2, 3])
def test_a_flipped_byte_in_any_acknowledged_record_stops_the_log(
    tmp_path: Path, record: int
) -> None:
    log = _open(tmp_path)
    for payload in _records(3):
        log.append([payload])
    (segment,) = log.segment_paths()
    log.close()
    data = bytearray(segment.read_bytes())
    frame = (len(data) - 64) // 3
    data[64 + frame * (record - 1) + frame // 2] ^= 0x01  # inside the record's payload
    segment.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt):
        _open(tmp_path)


def test_segments_rotate_and_a_removed_middle_segment_stops_the_log(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=2048)
    for payload in _records(30):
        log.append([payload])
    paths = log.segment_paths()
    assert len(paths) > 3
    log.close()
    assert [seq for seq, _ in _open(tmp_path, segment_bytes=2048).read_from(1)] == list(
        range(1, 31)
    )
    paths[1].unlink()
    with pytest.raises(StoreCorrupt):
        _open(tmp_path, segment_bytes=2048)


def test_released_segments_are_shredded_but_never_the_one_being_written(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=2048)
    for payload in _records(30):
        log.append([payload])
    before = log.segment_paths()
    log.release_through(30)
    (kept,) = log.segment_paths()
    assert kept == before[-1]
    assert not any(path.exists() for path in before[:-1])
    assert log.first_available() <= 31
    assert [seq for seq, _ in log.read_from(log.first_available())][-1:] in ([], [30])
    log.close()
    assert _open(tmp_path, segment_bytes=2048).durable_head().sequence == 30


def test_a_release_interrupted_while_shredding_is_finished_at_the_next_open(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, segment_bytes=2048)
    for payload in _records(30):
        log.append([payload])
    first = log.segment_paths()[0]
    log.close()
    # The crash came after the rename and half way through the overwrite.
    released = first.with_suffix(".released")
    first.rename(released)
    with released.open("r+b") as handle:
        handle.write(b"\0" * 512)
    again = _open(tmp_path, segment_bytes=2048)  # not taken for damage: it was released
    assert not released.exists()
    assert again.durable_head().sequence == 30
    again.close()


def test_segment_files_are_private(tmp_path: Path) -> None:
    log = _open(tmp_path / "log")
    log.append(_records(1))
    (segment,) = log.segment_paths()
    assert os.stat(segment).st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "log").st_mode & 0o777 == 0o700
    log.close()


def test_records_read_without_the_key_stop_at_a_torn_tail_and_refuse_a_damaged_frame(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    log.append(_records(3))
    (segment,) = log.segment_paths()
    log.close()
    with segment.open("ab") as handle:  # torn: a whole header, its payload cut short
        handle.write(_frame(4, GENESIS_CHAIN, b"x" * 500)[:100])
    assert [seq for seq, _ in records_after(tmp_path, 1)] == [2, 3]
    with segment.open("r+b") as handle:  # inside the first frame's header, after the segment's
        handle.seek(64 + 2)
        handle.write(b"\xff")
    with pytest.raises(StoreCorrupt):
        list(records_after(tmp_path, 0))
