"""The Batcher's policy on its own, with a fake model: when a batch waits and what it merges."""

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

from keras_transformer.serving.batching import Batcher

LONG_WAIT = 30.0  # seconds: far longer than any test may take, so a wait that happens shows


class FakeVersion:
    """Doubles its input; records each call's batch size; can hold calls until released."""

    retired = False

    def __init__(self):
        self.calls = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def run(self, signature_name, inputs):
        self.calls.append(len(inputs["x"]))
        self.entered.set()
        self.release.wait(timeout=60)
        return {"y": inputs["x"] * 2}


@pytest.fixture
def executor():
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def request(*values):
    return {"x": np.asarray(values, dtype=np.float32)}, len(values)


def test_a_lone_request_runs_without_waiting_for_company(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=8, max_wait_seconds=LONG_WAIT, max_concurrent_batches=2)
        inputs, size = request(1.0, 2.0)
        return await asyncio.wait_for(batcher.submit(version, "sig", inputs, size), timeout=LONG_WAIT / 3)

    outputs = asyncio.run(scenario())
    np.testing.assert_array_equal(outputs["y"], [2.0, 4.0])
    assert version.calls == [2]


def test_while_a_request_runs_the_next_ones_wait_and_are_merged(executor):
    version = FakeVersion()
    version.release.clear()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=3, max_wait_seconds=LONG_WAIT, max_concurrent_batches=2)
        first = asyncio.ensure_future(batcher.submit(version, "sig", *request(1.0)))
        await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
        # The first request holds one slot; the second gets the free one but,
        # with a request still running, waits for company instead of running alone.
        second = asyncio.ensure_future(batcher.submit(version, "sig", *request(2.0)))
        await asyncio.sleep(0.2)
        assert version.calls == [1]
        third = asyncio.ensure_future(batcher.submit(version, "sig", *request(3.0, 4.0)))
        version.release.set()
        return await asyncio.wait_for(asyncio.gather(first, second, third), timeout=LONG_WAIT / 3)

    first, second, third = asyncio.run(scenario())
    # The batch closed when full (3 examples), long before its wait ran out.
    assert version.calls == [1, 3]
    np.testing.assert_array_equal(first["y"], [2.0])
    np.testing.assert_array_equal(second["y"], [4.0])
    np.testing.assert_array_equal(third["y"], [6.0, 8.0])


def test_requests_queued_while_every_slot_is_busy_form_one_batch(executor):
    version = FakeVersion()
    version.release.clear()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=64, max_wait_seconds=0.0, max_concurrent_batches=1)
        first = asyncio.ensure_future(batcher.submit(version, "sig", *request(0.0)))
        await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
        rest = [asyncio.ensure_future(batcher.submit(version, "sig", *request(float(i)))) for i in range(1, 6)]
        await asyncio.sleep(0.1)
        version.release.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest), timeout=LONG_WAIT / 3)

    answers = asyncio.run(scenario())
    # With no wait at all, the five that queued behind the busy slot still ran together.
    assert version.calls == [1, 5]
    for index, outputs in enumerate(answers):
        np.testing.assert_array_equal(outputs["y"], [2.0 * index])
