"""The loss plot's axes (ftui.tui.axes) and the ETA's first estimate: pure functions."""

from ftui.rundir.fold import EtaWindow
from ftui.tui.axes import LR_MIN_ABS_SPAN, log_range, log_ticks, step_range, step_ticks, value_range, value_ticks


def test_step_ticks_are_whole_numbers():
    assert step_ticks(1, 60) == [20, 40, 60]
    assert step_ticks(29, 31) == [29, 30, 31]
    assert all(isinstance(t, int) for t in step_ticks(0.5, 1000.5))
    assert step_ticks(*step_range([7])) == [6, 7, 8]  # one step sits mid-axis, its neighbours as ticks


def test_one_point_gets_a_range_in_proportion_not_half_to_one_and_a_half():
    lo, hi = value_range([1.0])
    assert lo < 1.0 < hi and hi - lo < 0.2  # plotext drew 0.50..1.50
    lo, hi = value_range([5.2])
    assert lo < 5.2 < hi and 0.5 <= hi - lo < 1.0


def test_two_close_points_are_not_zoomed_into_a_cliff():
    lo, hi = value_range([2.50, 2.52])
    assert (2.52 - 2.50) / (hi - lo) < 0.1  # +0.02 is a small step on the axis
    lo, hi = value_range([5.0, 0.5])  # a real drop keeps its shape, with a margin
    assert 0 <= lo < 0.5 and 5.0 < hi < 5.5


def test_a_loss_axis_never_dips_below_zero_and_nothing_finite_gives_none():
    assert value_range([0.0, 0.01])[0] == 0.0
    assert value_range([float("nan"), float("inf")]) is None


def test_y_labels_share_one_precision():
    for lo, hi in [(0.95, 1.05), (0.2, 5.3), (2.38, 2.64), (0.0, 0.001)]:
        ticks, labels = value_ticks(lo, hi)
        assert len(ticks) >= 2 and all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks)
        assert len({len(label.split(".")[1]) for label in labels}) == 1, labels
    assert value_ticks(0.2, 5.3)[1] == ["2.0", "4.0"]  # a loss reads 2.0, not 2


def test_log_axis_ticks_powers_of_ten_over_decades_and_more_within_one():
    assert log_ticks(*log_range([1.0, 0.001])) == ([-3.0, -2.0, -1.0, 0.0], ["0.001", "0.01", "0.1", "1"])
    assert log_ticks(*log_range([1e-4, 1e-6]))[1] == ["1e-6", "1e-5", "1e-4"]
    assert log_ticks(*log_range([3.1, 0.6]))[1] == ["1", "2", "3"]  # within one decade: 1, 2, 3 x
    positions, labels = log_ticks(*log_range([2.50, 2.52]))  # too narrow for any: linear ticks
    assert len(labels) >= 2 and all(2.2 < float(label) < 2.9 for label in labels)
    assert log_range([0.0, -1.0, float("nan")]) is None  # nothing a log axis can place


def test_a_learning_rates_labels_share_one_power_of_ten():
    ticks, labels = value_ticks(*value_range([2e-5, 1e-4], LR_MIN_ABS_SPAN))
    assert labels == ["0.2e-4", "0.4e-4", "0.6e-4", "0.8e-4", "1.0e-4"]
    lo, hi = value_range([1e-4], LR_MIN_ABS_SPAN)  # a constant rate: a range in proportion
    assert 0.9e-4 < lo < 1e-4 < hi < 1.1e-4


def test_eta_shows_from_the_first_step_event_after_run_start():
    eta = EtaWindow()
    eta.start({"t": 100.0, "event": "run_start"})
    eta.add(130.0, 10)  # logging_steps 10: the first step event, 3 s per step
    assert eta.eta(10, 100) == 270.0
    eta.start({"t": 500.0, "resumed_from_step": 40})  # a resume: the window starts over at its step
    eta.add(510.0, 50)
    assert eta.eta(50, 100) == 50.0
    eta.start({"t": "bad", "resumed_from_step": True})  # an unreadable run_start changes nothing
    assert eta.eta(50, 100) == 50.0


def test_eta_does_not_swing_on_one_slow_step():
    eta = EtaWindow()
    for s in range(40):
        eta.add(s * 1.0 + (30.0 if s >= 39 else 0.0), s)  # 1 s per step, then a 30 s checkpoint save
    assert eta.eta(39, 139) < 2 * 100  # a 20-event window said 2.5x
