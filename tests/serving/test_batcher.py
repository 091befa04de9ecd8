"""The Batcher's policy on its own, with a fake model: when a batch waits and what it merges,
its bounded queues, and requests given up (deadline passed, caller cancelled) never computed."""

import asyncio
import concurrent.futures
import threading

import numpy as np
import pytest

from keras_transformer.serving.batching import Batcher, DeadlineExceeded, QueueFull

LONG_WAIT = 30.0  # seconds: far longer than any test may take, so a wait that happens shows


class FakeVersion:
    """Doubles its input; records each call's batch size; can hold calls until released."""

    retired = False
    model_name = "fake"
    version = 1

    def __init__(self):
        self.calls = []
        self.computed = []  # every input value the model computed, in order
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def run(self, signature_name, inputs):
        self.calls.append(len(inputs["x"]))
        self.computed.extend(inputs["x"].tolist())
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
        batcher = Batcher(
            executor, max_batch_size=8, max_wait_seconds=LONG_WAIT, max_concurrent_batches=2
        )
        inputs, size = request(1.0, 2.0)
        return await asyncio.wait_for(
            batcher.submit(version, "sig", inputs, size), timeout=LONG_WAIT / 3
        )

    outputs = asyncio.run(scenario())
    np.testing.assert_array_equal(outputs["y"], [2.0, 4.0])
    assert version.calls == [2]


def test_while_a_request_runs_the_next_ones_wait_and_are_merged(executor):
    version = FakeVersion()
    version.release.clear()

    async def scenario():
        batcher = Batcher(
            executor, max_batch_size=3, max_wait_seconds=LONG_WAIT, max_concurrent_batches=2
        )
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
        batcher = Batcher(
            executor, max_batch_size=64, max_wait_seconds=0.0, max_concurrent_batches=1
        )
        first = asyncio.ensure_future(batcher.submit(version, "sig", *request(0.0)))
        await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
        rest = [
            asyncio.ensure_future(batcher.submit(version, "sig", *request(float(i))))
            for i in range(1, 6)
        ]
        await asyncio.sleep(0.1)
        version.release.set()
        return await asyncio.wait_for(asyncio.gather(first, *rest), timeout=LONG_WAIT / 3)

    answers = asyncio.run(scenario())
    # With no wait at all, the five that queued behind the busy slot still ran together.
    assert version.calls == [1, 5]
    for index, outputs in enumerate(answers):
        np.testing.assert_array_equal(outputs["y"], [2.0 * index])


async def _hold_the_only_slot(batcher, version):
    """Starts a request (value -1) that holds the batcher's one slot until `version.release` is set."""
    version.release.clear()
    running = asyncio.ensure_future(batcher.submit(version, "sig", *request(-1.0)))
    await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
    return running


def test_a_full_queue_refuses_at_once_and_an_empty_queue_takes_any_size(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=8, max_wait_seconds=0.0, max_queued_examples=4)
        running = await _hold_the_only_slot(batcher, version)
        given_up = asyncio.ensure_future(batcher.submit(version, "sig", *request(8.0)))
        await asyncio.sleep(0)
        given_up.cancel()
        await asyncio.sleep(0)
        # Into an empty queue even a request over the limit is taken.
        large = asyncio.ensure_future(batcher.submit(version, "sig", *request(*range(6))))
        await asyncio.sleep(0)
        assert batcher.queue_depths() == {("fake", 1, "sig"): 6}
        with pytest.raises(QueueFull) as refused:
            await asyncio.wait_for(batcher.submit(version, "sig", *request(9.0)), timeout=1.0)
        # Another signature has its own queue.
        other = asyncio.ensure_future(batcher.submit(version, "other", *request(7.0)))
        await asyncio.sleep(0)
        assert batcher.queue_depths() == {("fake", 1, "sig"): 6, ("fake", 1, "other"): 1}
        version.release.set()
        await asyncio.wait_for(asyncio.gather(running, large, other), timeout=LONG_WAIT / 3)
        assert batcher.queue_depths() == {}
        return refused.value

    refused = asyncio.run(scenario())
    assert (refused.queued, refused.limit) == (6, 4)
    assert 9.0 not in version.computed and 8.0 not in version.computed


def test_requests_whose_deadline_passed_before_their_batch_started_are_not_computed(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=8, max_wait_seconds=0.0, max_queued_examples=100)
        running = await _hold_the_only_slot(batcher, version)
        late = [
            asyncio.ensure_future(batcher.submit(version, "sig", *request(float(i)), timeout=0.2))
            for i in range(5)
        ]
        patient = asyncio.ensure_future(
            batcher.submit(version, "sig", *request(10.0), timeout=LONG_WAIT)
        )
        results = await asyncio.wait_for(
            asyncio.gather(*late, return_exceptions=True), timeout=LONG_WAIT / 3
        )
        # Given up: they no longer count against the queue's limit.
        assert batcher.queue_depths() == {("fake", 1, "sig"): 1}
        version.release.set()
        await asyncio.wait_for(asyncio.gather(running, patient), timeout=LONG_WAIT / 3)
        return results

    results = asyncio.run(scenario())
    assert all(isinstance(result, DeadlineExceeded) for result in results)
    assert version.computed == [-1.0, 10.0]


def test_a_deadline_passing_while_the_model_runs_answers_at_once(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=8, max_wait_seconds=0.0)
        version.release.clear()
        started = asyncio.get_running_loop().time()
        with pytest.raises(DeadlineExceeded):
            await batcher.submit(version, "sig", *request(1.0), timeout=0.2)
        waited = asyncio.get_running_loop().time() - started
        version.release.set()
        return waited

    assert asyncio.run(scenario()) < LONG_WAIT / 3


def test_cancelled_requests_are_not_computed_and_a_batch_holds_only_live_ones(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(executor, max_batch_size=3, max_wait_seconds=0.0, max_queued_examples=100)
        running = await _hold_the_only_slot(batcher, version)
        waiting = [
            asyncio.ensure_future(batcher.submit(version, "sig", *request(float(i))))
            for i in range(6)
        ]
        await asyncio.sleep(0)
        for index in (0, 2, 3):  # as a client that disconnects cancels its request
            waiting[index].cancel()
        await asyncio.sleep(0)
        assert batcher.queue_depths() == {("fake", 1, "sig"): 3}
        version.release.set()
        return await asyncio.wait_for(
            asyncio.gather(running, *[waiting[i] for i in (1, 4, 5)]), timeout=LONG_WAIT / 3
        )

    answers = asyncio.run(scenario())
    # The three left fill one batch of three: the cancelled ones took no room in it.
    assert version.calls == [1, 3]
    assert version.computed == [-1.0, 1.0, 4.0, 5.0]
    for value, outputs in zip([-1.0, 1.0, 4.0, 5.0], answers):
        np.testing.assert_array_equal(outputs["y"], [2 * value])


def test_unmerged_requests_run_alone_in_a_bounded_queue_and_cancelled_ones_are_dropped(executor):
    version = FakeVersion()

    async def scenario():
        batcher = Batcher(
            executor, max_batch_size=8, max_wait_seconds=LONG_WAIT, max_queued_examples=3
        )
        version.release.clear()
        running = asyncio.ensure_future(batcher.submit(version, "sig", *request(-1.0), merge=False))
        await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
        waiting = [
            asyncio.ensure_future(batcher.submit(version, "sig", *request(v), merge=False))
            for v in (1.0, 2.0, 3.0)
        ]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await batcher.submit(version, "sig", *request(4.0), merge=False)
        waiting[1].cancel()
        version.release.set()
        return await asyncio.wait_for(
            asyncio.gather(running, waiting[0], waiting[2]), timeout=LONG_WAIT / 3
        )

    answers = asyncio.run(scenario())
    # One at a time, never merged, never waiting for company.
    assert version.calls == [1, 1, 1]
    assert version.computed == [-1.0, 1.0, 3.0]
    np.testing.assert_array_equal(answers[2]["y"], [6.0])


def test_a_request_given_up_while_its_batch_waits_for_company_is_left_out(executor):
    version = FakeVersion()
    version.release.clear()

    async def scenario():
        batcher = Batcher(
            executor, max_batch_size=2, max_wait_seconds=LONG_WAIT, max_concurrent_batches=2
        )
        running = asyncio.ensure_future(batcher.submit(version, "sig", *request(-1.0)))
        await asyncio.get_running_loop().run_in_executor(None, version.entered.wait, 10)
        # It takes the free slot and, with a request running, waits for company.
        given_up = asyncio.ensure_future(batcher.submit(version, "sig", *request(1.0)))
        await asyncio.sleep(0.1)
        given_up.cancel()
        await asyncio.sleep(0)
        # Its company fills the batch, which then starts without it.
        company = asyncio.ensure_future(batcher.submit(version, "sig", *request(2.0)))
        await asyncio.sleep(0.1)
        version.release.set()
        _, answer = await asyncio.wait_for(asyncio.gather(running, company), timeout=LONG_WAIT / 3)
        return answer

    answer = asyncio.run(scenario())
    assert version.computed == [-1.0, 2.0]
    np.testing.assert_array_equal(answer["y"], [4.0])
