"""busbw / algbw against hand-computed values (nccl-tests doc/PERFORMANCE.md)."""

from pathlib import Path

import pandas as pd
import pytest

from gpuprof.analysis.bandwidth import bus_factor, summarize_collectives
from gpuprof.errors import UsageError

HAND = {
    ("all_reduce", 2): 1.0,
    ("all_reduce", 4): 1.5,
    ("all_reduce", 8): 1.75,
    ("all_gather", 2): 0.5,
    ("all_gather", 8): 0.875,
    ("reduce_scatter", 4): 0.75,
    ("all_to_all", 4): 0.75,
    ("broadcast", 8): 1.0,
    ("reduce", 4): 1.0,
    ("sendrecv", 2): 1.0,
    ("all_reduce", 1): 0.0,
}


@pytest.mark.parametrize(("key", "factor"), HAND.items())
def test_bus_factor(key: tuple[str, int], factor: float) -> None:
    assert bus_factor(*key) == pytest.approx(factor)


def test_bus_factor_unknown_op() -> None:
    with pytest.raises(ValueError, match="no bus factor"):
        bus_factor("gather", 2)


def _frame(op: str, n: int, size: int, times: list[list[float]]) -> pd.DataFrame:
    """times[rank][iteration] in microseconds."""
    rows = []
    for rank, per_rank in enumerate(times):
        for it, t in enumerate(per_rank):
            rows.append(
                {
                    "case_id": f"{op}.x",
                    "op": op,
                    "dtype": "float32",
                    "redop": "sum",
                    "size_bytes": size,
                    "in_place": True,
                    "scope": "global",
                    "group": "all",
                    "world_size": n,
                    "num_nodes": 1,
                    "rank": rank,
                    "iteration": it,
                    "time_us": t,
                    "nwrong": 0,
                }
            )
    return pd.DataFrame(rows)


def test_summary_takes_slowest_rank_then_median() -> None:
    # Iteration maxima are 100, 300, 200 -> median 200 us; never a mean of per-rank numbers.
    frame = _frame("all_reduce", 4, 1_000_000, [[100, 50, 200], [90, 300, 10]] + [[1, 1, 1]] * 2)
    row = summarize_collectives(frame).iloc[0]
    assert row["time_us"] == 200
    assert row["algbw_gbps"] == pytest.approx(1_000_000 / 200e-6 / 1e9)  # 5 GB/s
    assert row["busbw_gbps"] == pytest.approx(5.0 * 1.5)
    assert row["num_iterations"] == 3


@pytest.mark.parametrize(("op", "n"), [("all_gather", 8), ("broadcast", 2), ("all_to_all", 4)])
def test_summary_busbw_is_algbw_times_factor(op: str, n: int) -> None:
    frame = _frame(op, n, 1 << 20, [[1000.0, 1000.0]] * n)
    row = summarize_collectives(frame).iloc[0]
    assert row["algbw_gbps"] == pytest.approx((1 << 20) / 1000e-6 / 1e9)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * bus_factor(op, n))


def test_summary_sums_wrong_elements_over_ranks() -> None:
    frame = _frame("all_reduce", 2, 1024, [[5.0, 5.0], [5.0, 5.0]])
    frame.loc[frame["rank"] == 1, "nwrong"] = 3
    assert summarize_collectives(frame).iloc[0]["nwrong"] == 3


def test_summary_checks_columns_first() -> None:
    with pytest.raises(UsageError, match="lacks columns"):
        summarize_collectives(pd.DataFrame({"op": ["all_reduce"]}))


def test_the_busbw_band_holds_the_median(two_rank_run: Path) -> None:
    from gpuprof import open_run
    from gpuprof.analysis.summary import summarize_run

    summary = summarize_run(open_run(two_rank_run), "collectives")
    assert (summary["busbw_p10_gbps"] <= summary["busbw_gbps"] + 1e-12).all()
    assert (summary["busbw_gbps"] <= summary["busbw_p90_gbps"] + 1e-12).all()


def test_slowest_iterations_skip_missing_times_and_absent_numbers() -> None:
    # rank 1 has no time at iteration 0 (NaN): rank 0's 100 stands; iteration numbers 0, 2, 5
    # are three iterations (no slot for 1, 3, 4); the rows in any order give the same
    frame = _frame("all_reduce", 2, 1024, [[100.0, 300.0, 200.0], [float("nan"), 50.0, 400.0]])
    frame["iteration"] = frame["iteration"].map({0: 0, 1: 2, 2: 5})
    for rows in (frame, frame.sample(frac=1.0, random_state=3)):
        row = summarize_collectives(rows).iloc[0]
        assert row["num_iterations"] == 3
        assert row["time_us"] == 300  # median of 100, 300, 400
        assert row["time_us_min"] == 100


def test_summary_groups_like_a_groupby_on_every_row() -> None:
    # two cases whose rows alternate rank by rank: one record per rank and case
    first = _frame("all_reduce", 2, 1024, [[10.0, 20.0], [30.0, 5.0]])
    second = _frame("all_reduce", 2, 2048, [[7.0, 8.0], [9.0, 1.0]]).assign(case_id="x2")
    frame = pd.concat([first, second], ignore_index=True)
    summary = summarize_collectives(frame).set_index("size_bytes")
    expected = frame.groupby(["size_bytes", "iteration"])["time_us"].max().groupby(level=0)
    assert summary["time_us"].to_dict() == expected.median().to_dict()


def _curve(
    times: dict[bool, list[tuple[int, float, float]]], op: str = "all_reduce"
) -> pd.DataFrame:
    """A collectives summary of one shape: per in_place, (size, median us, p99 us) rows."""
    rows = [
        {
            "op": op, "dtype": "float32", "redop": "sum", "scope": "global", "group": "all",
            "world_size": 8, "num_nodes": 2, "in_place": place, "size_bytes": size,
            "time_us": median, "time_us_p99": p99,
        }
        for place, points in times.items()
        for size, median, p99 in points
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_a_slow_size_is_a_step_past_its_bytes_in_both_places() -> None:
    from gpuprof.analysis.bandwidth import slow_steps

    # Polaris's 2-node all_reduce (alcf-nccl-tests): 64 KiB 78.5 us, 128 KiB 370.8 us
    jump = [(32768, 66.4, 66.4), (65536, 78.5, 78.5), (131072, 370.8, 370.8)]
    (row,) = slow_steps(_curve({False: jump, True: jump})).itertuples()
    assert (row.size_small, row.size_large, row.kind) == (65536, 131072, "jump")
    assert row.ratio == pytest.approx(370.8 / 78.5)
    # in one place only, where both were measured: one curve's outlier, not a step
    flat = [(32768, 66.4, 66.4), (65536, 78.5, 78.5), (131072, 90.0, 90.0)]
    assert slow_steps(_curve({False: jump, True: flat})).empty
    # within the smaller size's slowest iterations: noise
    noisy = [(65536, 78.5, 300.0), (131072, 370.8, 400.0)]
    assert slow_steps(_curve({False: noisy})).empty
    # a place with no time at a size is as if not measured there: the other place decides
    gap = [(32768, 66.4, 66.4), (65536, 78.5, 78.5), (131072, float("nan"), float("nan"))]
    assert len(slow_steps(_curve({False: jump, True: gap}))) == 1
    # the margin is over the bytes: 4x the bytes may take 5x the time, not 6.5x
    assert slow_steps(_curve({False: [(1 << 16, 10.0, 10.0), (1 << 18, 50.0, 50.0)]})).empty
    (big,) = slow_steps(
        _curve({False: [(1 << 16, 10.0, 10.0), (1 << 18, 65.0, 65.0)]})
    ).itertuples()
    assert big.kind == "jump"


def test_a_smaller_size_slower_than_a_larger_one_is_a_drop() -> None:
    from gpuprof.analysis.bandwidth import slow_steps

    # NVIDIA/nccl issue 2441: 1,000,000 B 343.55 / 330.00 us, 1,100,000 B 152.97 / 155.83 us
    out = [(900000, 320.81, 320.81), (1000000, 343.55, 343.55), (1100000, 152.97, 152.97)]
    inp = [(900000, 320.50, 320.50), (1000000, 330.00, 330.00), (1100000, 155.83, 155.83)]
    (row,) = slow_steps(_curve({False: out, True: inp})).itertuples()
    assert (row.size_small, row.size_large, row.kind) == (1000000, 1100000, "drop")
    assert (row.time_small, row.time_large) == (343.55, 152.97)  # out of place first
    # a drop in one place and a jump in the other is not one step
    assert slow_steps(
        _curve({False: out, True: [(1000000, 100.0, 100.0), (1100000, 400.0, 400.0)]})
    ).empty
