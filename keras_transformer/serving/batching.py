"""Server-side batching: concurrent requests to one signature merged into one model call.

As in TensorFlow Serving's batching, a batch is closed when it holds
`max_batch_size` examples or when `max_wait_seconds` have passed since a
model slot became free for it; while every slot is busy, arriving requests
queue and form the next batch. Unlike TensorFlow Serving, a batch waits for
company only while other requests to its signature are running: a lone
client's request, which nothing could join, runs at once instead of paying
the wait. Each request gets back exactly its own rows.
"""

import asyncio

import numpy as np


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
        on_batch: called as `on_batch(served_version, signature_name, examples)`
            for each batch before its model call (metrics).
    """

    def __init__(self, executor, max_batch_size=32, max_wait_seconds=0.005, max_concurrent_batches=1,
                 on_batch=None):
        self.executor = executor
        self.on_batch = on_batch
        self.max_batch_size = max_batch_size
        self.max_wait_seconds = max_wait_seconds
        self._slots = asyncio.Semaphore(max_concurrent_batches)
        self._queues = {}
        self._in_flight = {}  # (version, signature) -> requests submitted and not yet answered
        self._tasks = set()  # the event loop keeps only weak references to tasks

    async def submit(self, served_version, signature_name, inputs, batch_size):
        """Runs `inputs` (`{name: [batch_size, ...] array}`) and returns its own outputs."""
        key = (served_version, signature_name)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue()
            task = asyncio.get_running_loop().create_task(self._serve(key, queue))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        future = asyncio.get_running_loop().create_future()
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            await queue.put((inputs, batch_size, future))
            return await future
        finally:
            self._in_flight[key] -= 1
            if not self._in_flight[key]:
                del self._in_flight[key]

    async def _serve(self, key, queue):
        served_version, signature_name = key
        loop = asyncio.get_running_loop()
        pending = None
        while True:
            first = pending or await queue.get()
            pending = None
            # While every slot is busy, requests pile up in the queue and the
            # next batch forms from them.
            await self._slots.acquire()
            batch, size = [first], first[1]
            deadline = loop.time() + self.max_wait_seconds
            while size < self.max_batch_size:
                if not queue.empty():
                    item = queue.get_nowait()
                elif loop.time() >= deadline or not self._others_running(key, batch):
                    break
                else:
                    try:
                        item = await asyncio.wait_for(queue.get(), timeout=deadline - loop.time())
                    except asyncio.TimeoutError:
                        break
                if size + item[1] > self.max_batch_size:
                    pending = item  # it opens the next batch
                    break
                batch.append(item)
                size += item[1]
            task = loop.create_task(self._run_in_slot(served_version, signature_name, batch, loop))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if pending is None and queue.empty():
                # An idle loop would hold its version in memory after a swap;
                # the next request to this signature starts a new one.
                del self._queues[key]
                return

    def _others_running(self, key, batch):
        """Whether requests to `key` outside `batch` are being answered (their
        clients may send again soon, so waiting can pay)."""
        return self._in_flight.get(key, 0) > len(batch)

    async def _run_in_slot(self, served_version, signature_name, batch, loop):
        try:
            if self.on_batch is not None:
                self.on_batch(served_version, signature_name, sum(size for _, size, _ in batch))
            await self._run(served_version, signature_name, batch, loop)
        finally:
            self._slots.release()

    async def _run(self, served_version, signature_name, batch, loop):
        try:
            names = list(batch[0][0])
            merged = {name: np.concatenate([inputs[name] for inputs, _, _ in batch], axis=0) for name in names}
            outputs = await loop.run_in_executor(self.executor, served_version.run, signature_name, merged)
        except Exception as error:
            if len(batch) > 1:
                # One request's bad input must not fail the others merged with it:
                # each runs alone and gets its own answer or its own error.
                for item in batch:
                    await self._run(served_version, signature_name, [item], loop)
                return
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        start = 0
        for _, size, future in batch:
            if not future.done():
                future.set_result({name: value[start : start + size] for name, value in outputs.items()})
            start += size
