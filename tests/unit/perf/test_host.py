import time

from pipeline.perf import host


def test_a_repeat_counts_the_cpu_time_its_threads_got_not_the_wall():
    """A probe beside another busy process waits for the cores: that wait is not the hardware's.
    Here the wait is a sleep (no CPU time at all), beside a short computation."""

    def work():
        time.sleep(0.05)
        sum(range(20_000))

    assert host._best(work) < 0.05
