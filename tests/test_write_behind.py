"""write_behind: batches written in order, one at a time, with errors from either side raised to the caller only
once no write is in flight (the caller's rollback must not race a statement)."""

from __future__ import annotations

import threading
import time

import pytest

from registry.store.sql.write_behind import write_behind


class Recorder:
    def __init__(self, fail_on: int | None = None) -> None:
        self.written: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.threads: set[str] = set()
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def write(self, batch: int) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.threads.add(threading.current_thread().name)
        time.sleep(0.01)
        try:
            if batch == self.fail_on:
                raise RuntimeError(f"write of {batch} failed")
            self.written.append(batch)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_batches_are_written_in_order_one_at_a_time_in_another_thread():
    rec = Recorder()
    write_behind(iter(range(20)), rec.write)
    assert rec.written == list(range(20))
    assert rec.most_in_flight == 1
    assert threading.current_thread().name not in rec.threads


def test_the_next_batch_is_produced_while_the_previous_is_written():
    """The writes of batches 1 and 2 each wait until the next batch has been produced: done in turn, they would wait
    in vain (5 s) and say so. (Batch 0 is written once batch 1 exists: write_behind reads two batches before it starts
    a thread, so that one batch is written in the calling thread.)"""
    started = {b: threading.Event() for b in range(4)}
    made = {b: threading.Event() for b in range(4)}
    overlapped = []

    def write(batch: int) -> None:
        started[batch].set()
        if batch in (1, 2):
            overlapped.append(made[batch + 1].wait(5))

    def batches():
        yield 0
        yield 1
        for i in (2, 3):
            assert started[i - 1].wait(5)  # the previous batch's write has begun
            made[i].set()
            yield i

    write_behind(batches(), write)
    assert overlapped == [True, True]


def test_a_single_batch_is_written_in_the_calling_thread():
    rec = Recorder()
    write_behind(iter([7]), rec.write)
    assert rec.written == [7] and rec.threads == {threading.current_thread().name}


def test_a_producer_error_is_raised_after_the_write_in_flight_ends():
    rec = Recorder()

    def batches():
        yield 0
        yield 1
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        write_behind(batches(), rec.write)
    assert rec.in_flight == 0 and rec.written == [0, 1]


def test_a_write_error_stops_the_producer_within_one_batch():
    rec, produced = Recorder(fail_on=2), []

    def batches():
        for i in range(10):
            produced.append(i)
            yield i

    with pytest.raises(RuntimeError, match="write of 2 failed"):
        write_behind(batches(), rec.write)
    assert rec.written == [0, 1] and rec.in_flight == 0
    assert max(produced) <= 3


def test_an_in_memory_registry_takes_batches_written_behind():
    """An in-memory SQLite registry has one connection, made in this thread; the writer thread uses it too."""
    from registry import testing
    from registry.store.sql.store import Store

    store = Store("sqlite://")
    dev = testing.device()
    batches = [[testing.record(0, j, dev) for j in range(k, k + 3)] for k in (0, 3, 6)]
    result = store.ingest_batches([testing.workload(0)], lambda: iter(batches))
    assert result.records_new == 9
    store.close()
