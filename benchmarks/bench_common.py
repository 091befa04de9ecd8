"""What the benchmarks share: how they time things (rounds of calls,
interleaved across the implementations compared, summarized by medians over
rounds), their TensorFlow thread setting and how they write results.

On a shared machine the load drifts over seconds. Timing every implementation
once per round, in an order that changes from round to round, lets that drift
hit all of them alike; the median over rounds ignores the odd disturbed round;
and a per-round ratio (`paired_ratio`) cancels drift slower than one round.

Standard library only at import: the JAX benchmark imports this on machines
without TensorFlow, and the tests drive the timing with a fake clock.
"""

import csv
import json
import os
import statistics
import time


def seconds_per_call(function, calls=1, wait=None, clock=time.perf_counter):
    """Mean wall-clock seconds of `calls` back-to-back calls of `function()`.

    `wait(result)` runs on the last call's result before the clock stops, for
    frameworks that return before the work is done (a TensorFlow tensor's
    `.numpy()`, `jax.block_until_ready`): the earlier calls are queued ahead of
    the last, so waiting for it waits for them all, and the calls in between are
    not slowed by a round trip each.
    """
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    start = clock()
    for _ in range(calls):
        result = function()
    if wait is not None:
        wait(result)
    return (clock() - start) / calls


def interleaved_orders(names, rounds):
    """The order of each of `rounds` rounds over `names`.

    Rotated by one place each round, so every name runs first (and last) equally
    often; every other full rotation is reversed, so each name also runs right
    after each other one. Two names give A B, B A, B A, A B, ...
    """
    names = list(names)
    if not names:
        raise ValueError("nothing to time: no names given")
    for index in range(rounds):
        shift = index % len(names)
        order = names[shift:] + names[:shift]
        yield order[::-1] if (index // len(names)) % 2 else order


def time_interleaved(functions, rounds, calls=1, warmup=0, wait=None, clock=time.perf_counter):
    """Seconds per call of each of `functions` (a dict name -> callable), per round.

    First `warmup` untimed calls of each (tracing, compilation, caches), then
    `rounds` rounds in `interleaved_orders`, each timing `calls` calls of every
    function with `seconds_per_call`. Returns {name: [seconds per call, one per
    round]}; take `statistics.median` of a list, or `paired_ratio` of two.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    for function in functions.values():
        for _ in range(warmup):
            result = function()
            if wait is not None:
                wait(result)
    seconds = {name: [] for name in functions}
    for order in interleaved_orders(functions, rounds):
        for name in order:
            seconds[name].append(seconds_per_call(functions[name], calls, wait, clock))
    return seconds


def paired_ratio(numerator_rounds, denominator_rounds):
    """Median over rounds of numerator / denominator within the same round.

    Both were timed close together in each round, so load that changes between
    rounds scales both and cancels in their ratio.
    """
    if len(numerator_rounds) != len(denominator_rounds) or not numerator_rounds:
        raise ValueError(
            f"paired rounds must be non-empty and of one length, got {len(numerator_rounds)} "
            f"and {len(denominator_rounds)}"
        )
    return statistics.median(n / d for n, d in zip(numerator_rounds, denominator_rounds))


def set_tensorflow_threads(threads):
    """Limits TensorFlow to `threads` intra- and inter-op threads.

    0 keeps TensorFlow's default (all cores).
    """
    if threads < 0:
        raise ValueError(f"threads must be 0 (all) or positive, got {threads}")
    if threads:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def write_json(path, report):
    """Writes `report` as indented JSON to `path`, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as file:
        json.dump(report, file, indent=2, default=str)


def write_labelled_csv(path, rows):
    """Writes `(text, label)` rows as a UTF-8 CSV with a `text,label` header, the
    columns the `csv:` loader reads by default, creating its folder."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def written_once(path, write):
    """`path`, first written by `write([path])` (a corpus script's `main`) if it is missing."""
    if not os.path.exists(path):
        write([path])
    return path


def saved_run_settings(run_dir):
    """The `settings.json` a training run wrote in `run_dir`: the settings it
    used, with the values it chose from the data where the settings said None."""
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        return json.load(settings_file)
