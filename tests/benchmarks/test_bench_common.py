"""benchmarks/bench_common.py: the benchmarks' timing, driven by a fake clock."""

import itertools
import statistics

import pytest
from bench_common import interleaved_orders, paired_ratio, seconds_per_call, time_interleaved


class FakeClock:
    """A clock that moves only when a fake workload runs."""

    def __init__(self):
        self.now = 0.0
        self.log = []

    def __call__(self):
        return self.now

    def workload(self, name, durations):
        """A function whose successive calls take `durations` seconds each."""
        durations = iter(durations)

        def call():
            self.now += next(durations)
            self.log.append(name)
            return name

        return call


def test_seconds_per_call_is_the_mean_over_the_calls_and_counts_one_wait_at_the_end():
    clock = FakeClock()
    waited = []

    def wait(result):
        waited.append((result, len(clock.log)))
        clock.now += 3.0

    seconds = seconds_per_call(clock.workload("a", [1.0, 2.0, 6.0]), 3, wait=wait, clock=clock)
    assert seconds == pytest.approx((1.0 + 2.0 + 6.0 + 3.0) / 3)
    assert waited == [("a", 3)]  # once, on the last result, after every call


def test_time_interleaved_leaves_the_warm_up_out_and_times_each_round():
    clock = FakeClock()
    # The first call of each stands for tracing: far slower, and not to be counted.
    functions = {
        "a": clock.workload("a", [100.0, 1.0, 1.0, 2.0, 4.0, 50.0, 50.0]),
        "b": clock.workload("b", [100.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0]),
    }
    seconds = time_interleaved(functions, rounds=3, calls=2, warmup=1, clock=clock)
    assert seconds == {"a": [1.0, 3.0, 50.0], "b": [3.0, 4.0, 5.0]}
    assert statistics.median(seconds["a"]) == 3.0  # the disturbed round does not move it


def test_time_interleaved_runs_the_rounds_in_the_interleaved_order():
    clock = FakeClock()
    functions = {name: clock.workload(name, itertools.repeat(1.0)) for name in "ab"}
    time_interleaved(functions, rounds=4, clock=clock)
    assert "".join(clock.log) == "abbabaab"


def test_two_names_take_turns_going_first_in_abba_order():
    assert ["".join(order) for order in interleaved_orders("ab", 8)] == ["ab", "ba", "ba", "ab"] * 2


def test_three_names_run_in_every_order_once_in_six_rounds():
    orders = [tuple(order) for order in interleaved_orders("abc", 6)]
    assert sorted(orders) == sorted(itertools.permutations("abc"))


def test_paired_ratio_is_the_median_of_the_ratios_within_rounds():
    # Load doubled in the second round and again in the third: per-round ratios
    # stay 0.5 there, where the ratio of the medians (2 / 40) would not.
    slow, fast = [1.0, 2.0, 30.0], [2.0, 40.0, 60.0]
    assert paired_ratio(slow, fast) == 0.5
    assert statistics.median(slow) / statistics.median(fast) == 0.05


def test_bad_counts_are_refused_with_what_was_wrong():
    clock = FakeClock()
    with pytest.raises(ValueError, match="calls must be at least 1"):
        seconds_per_call(clock.workload("a", [1.0]), 0, clock=clock)
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        time_interleaved({"a": clock.workload("a", [1.0])}, rounds=0, clock=clock)
    with pytest.raises(ValueError, match="paired rounds"):
        paired_ratio([1.0, 2.0], [1.0])
