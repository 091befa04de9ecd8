"""Server-side batching: concurrent requests to one signature merged into one model call.

As in TensorFlow Serving's batching, a batch is closed when it holds
`max_batch_size` examples or when `max_wait_seconds` have passed since a
model slot became free for it; while every slot is busy, arriving requests
queue and form the next batch. Unlike TensorFlow Serving, a batch waits for
company only while other requests to its signature are running: a lone
client's request, which nothing could join, runs at once instead of paying
the wait. Each request gets back exactly its own rows.

Every queue is bounded, and a request is computed only if it is still
wanted when its batch starts: one whose deadline passed or whose caller
gave up (cancelled `submit`, e.g. its client disconnected) leaves its queue
at once and never reaches the model. Without that, a burst of abandoned
requests would be computed one after another while new ones wait behind them.
"""

import asyncio
import collections

import numpy as np


class QueueFull(Exception):
    """A request refused because its queue already holds `queued` examples (the limit is
    `limit`)."""

    def __init__(self, served_version, signature_name, queued, limit):
        super().__init__(
            f"the queue of {signature_name} holds {queued} examples; the limit is {limit}"
        )
        self.served_version = served_version
        self.signature_name = signature_name
        self.queued = queued
        self.limit = limit


class DeadlineExceeded(Exception):
    """A request that had no answer within its time; if its batch had not started, it was not
    computed."""


# A request's states: waiting in its queue (or in a batch being formed),
# handed to the model, or given up by its caller before that.
_QUEUED, _STARTED, _DROPPED = "queued", "started", "dropped"


class _Request:
    __slots__ = ("inputs", "size", "weight", "future", "state")

    def __init__(self, inputs, size, future):
        self.inputs = inputs
        self.size = size
        # A request of no examples still costs a model call.
        self.weight = max(size, 1)
        self.future = future
        self.state = _QUEUED


class _Queue:
    """The requests waiting for one (version, signature), oldest first."""

    def __init__(self, merge):
        # False: every request runs alone (batching off, or a signature without a batch axis).
        self.merge = merge
        self.waiting = collections.deque()  # may still hold dropped requests; they are skipped
        self.examples = 0  # weights of the requests waiting, dropped ones not counted
        self.arrived = asyncio.Event()

    def next_live(self):
        """The oldest request still wanted, left in the queue (None if there is none)."""
        while self.waiting and self.waiting[0].state is not _QUEUED:
            self.waiting.popleft()
        return self.waiting[0] if self.waiting else None


class Batcher:
    """Merges `submit` calls that share a (version, signature) into batched calls.

    Args:
        executor: where model calls run (TensorFlow releases the GIL, so a
            thread pool lets the event loop go on accepting requests).
        max_batch_size: most examples in one model call; a request larger than
            this runs alone.
        max_wait_seconds: how long a batch waits for more requests once a
            slot is free (requests already queued join at once).
        max_concurrent_batches: merged calls running at once, over all
            signatures (TensorFlow Serving's `num_batch_threads`); size it to
            the executor's threads so batching uses them all.
        max_queued_examples: most examples waiting per (version, signature)
            for their model call to start; a request that would go past it is
            refused with `QueueFull`, unless its queue is empty (so a request
            larger than the limit is never refused for its size alone).
        on_batch: called as `on_batch(served_version, signature_name, examples)`
            for each batch before its model call (metrics).
    """

    def __init__(
        self,
        executor,
        max_batch_size=32,
        max_wait_seconds=0.005,
        max_concurrent_batches=1,
        max_queued_examples=1024,
        on_batch=None,
    ):
        self.executor = executor
        self.on_batch = on_batch
        self.max_batch_size = max_batch_size
        self.max_wait_seconds = max_wait_seconds
        self.max_queued_examples = max_queued_examples
        self._slots = asyncio.Semaphore(max_concurrent_batches)
        self._queues = {}  # (version, signature) -> _Queue, while its serving loop runs
        self._in_flight = {}  # (version, signature) -> requests submitted and not yet answered
        self._tasks = set()  # the event loop keeps only weak references to tasks

    def queue_depths(self):
        """{(model name, version, signature name): examples waiting for their model call} over
        the queues now in use; a queue that emptied is left out (its loop has ended)."""
        return {
            (served_version.model_name, served_version.version, signature_name): queue.examples
            for (served_version, signature_name), queue in self._queues.items()
        }

    async def submit(
        self, served_version, signature_name, inputs, batch_size, timeout=None, merge=True
    ):
        """Runs `inputs` (`{name: [batch_size, ...] array}`) and returns its own outputs.

        Args:
            timeout: seconds to wait for the answer (None: no limit); past it
                `DeadlineExceeded` is raised, and a request whose batch had not
                started is not computed.
            merge: False runs the request alone, its inputs as given (for
                signatures without a batch axis, or with batching turned off).

        Raises `QueueFull` at once when the queue is full. Cancelling the call
        drops the request if its batch has not started.
        """
        key = (served_version, signature_name)
        queue = self._queues.get(key)
        request = _Request(inputs, batch_size, asyncio.get_running_loop().create_future())
        if (
            queue is not None
            and queue.examples
            and queue.examples + request.weight > self.max_queued_examples
        ):
            raise QueueFull(
                served_version, signature_name, queue.examples, self.max_queued_examples
            )
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded()
        if queue is None:
            queue = self._queues[key] = _Queue(merge)
            self._start(self._serve(key, queue))
        queue.waiting.append(request)
        queue.examples += request.weight
        queue.arrived.set()
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            # wait_for cancels the future on a timeout and when this call is
            # cancelled; the serving loop then skips the request.
            return await asyncio.wait_for(request.future, timeout)
        except TimeoutError:
            raise DeadlineExceeded() from None
        finally:
            if request.state is _QUEUED:
                request.state = _DROPPED
                queue.examples -= request.weight
            self._in_flight[key] -= 1
            if not self._in_flight[key]:
                del self._in_flight[key]

    def _start(self, coroutine):
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, key, queue):
        served_version, signature_name = key
        loop = asyncio.get_running_loop()
        try:
            while queue.next_live() is not None:
                # While every slot is busy, requests pile up in the queue and
                # the next batch forms from them.
                await self._slots.acquire()
                batch = await self._form_batch(key, queue, loop)
                # Requests given up while the batch formed are left out.
                batch = [request for request in batch if request.state is _QUEUED]
                if not batch:
                    self._slots.release()
                    continue
                for request in batch:
                    request.state = _STARTED
                    queue.examples -= request.weight
                self._start(
                    self._run_in_slot(served_version, signature_name, batch, queue.merge, loop)
                )
        finally:
            # Ends with its queue: an idle loop would hold its version in
            # memory after a swap; the next request to this signature starts
            # a new one. No await between the empty check and this.
            if self._queues.get(key) is queue:
                del self._queues[key]
            for request in queue.waiting:  # only if the loop itself failed or was cancelled
                if request.state is _QUEUED and not request.future.done():
                    request.future.set_exception(RuntimeError("the batching loop stopped"))

    async def _form_batch(self, key, queue, loop):
        """Takes the oldest live requests that fit in one batch, waiting for company while others
        run."""
        first = queue.next_live()
        if first is None:
            return []
        queue.waiting.popleft()
        batch, size = [first], first.size
        if not queue.merge:
            return batch
        deadline = loop.time() + self.max_wait_seconds
        while size < self.max_batch_size:
            following = queue.next_live()
            if following is None:
                if loop.time() >= deadline or not self._others_running(key, batch):
                    break
                queue.arrived.clear()
                try:
                    await asyncio.wait_for(queue.arrived.wait(), timeout=deadline - loop.time())
                except TimeoutError:
                    break
                continue
            if size + following.size > self.max_batch_size:
                break  # it opens the next batch
            queue.waiting.popleft()
            batch.append(following)
            size += following.size
        return batch

    def _others_running(self, key, batch):
        """Whether requests to `key` outside `batch` are being answered (their
        clients may send again soon, so waiting can pay)."""
        return self._in_flight.get(key, 0) > len(batch)

    async def _run_in_slot(self, served_version, signature_name, batch, merge, loop):
        try:
            if self.on_batch is not None:
                self.on_batch(
                    served_version, signature_name, sum(request.size for request in batch)
                )
            await self._run(served_version, signature_name, batch, merge, loop)
        finally:
            self._slots.release()

    async def _run(self, served_version, signature_name, batch, merge, loop):
        try:
            if merge:
                names = list(batch[0].inputs)
                inputs = {
                    name: np.concatenate([request.inputs[name] for request in batch], axis=0)
                    for name in names
                }
            else:
                inputs = batch[0].inputs
            outputs = await loop.run_in_executor(
                self.executor, served_version.run, signature_name, inputs
            )
        except Exception as error:
            if len(batch) > 1:
                # One request's bad input must not fail the others merged with it:
                # each still wanted runs alone and gets its own answer or error.
                for request in batch:
                    if not request.future.done():
                        await self._run(served_version, signature_name, [request], merge, loop)
                return
            if not batch[0].future.done():
                batch[0].future.set_exception(error)
            return
        if not merge:
            if not batch[0].future.done():
                batch[0].future.set_result(outputs)
            return
        start = 0
        for request in batch:
            if not request.future.done():
                request.future.set_result(
                    {name: value[start : start + request.size] for name, value in outputs.items()}
                )
            start += request.size
