"""Telemetry: NVML through the fake (missing metrics, throttling, counter wrap), host
counters, the sampler's rate, attribution to cases, and the report section."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprof import open_run
from gpuprof.analysis.health import attribute, case_windows
from gpuprof.analysis.series import node_series, nodes_series
from gpuprof.machine.clocks import decode_reasons
from gpuprof.machine.fake_nvml import FakeNVML
from gpuprof.telemetry import sampler
from gpuprof.telemetry.nvml import GpuSampler, counter_delta
from tests.conftest import Gp


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_counter_delta_across_wrap_around() -> None:
    assert counter_delta(10, 25) == 15
    assert counter_delta(2**64 - 10, 5) == 15
    assert counter_delta(2**32 - 1, 1, bits=32) == 2


def test_fake_gpus_missing_throttled_and_wrapping() -> None:
    clock = Clock()
    nvml = FakeNVML.dgx(3)
    nvml.clock, nvml.t0 = clock, 0.0
    nvml.gpus[1].clock_reasons = 0x40 | 0x1  # HW thermal slowdown (+ idle, not a slowdown)
    nvml.gpus[2].unsupported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEccErrors"}
    nvml.gpus[0].nvlink_kib_start = 2**64 - 2_000_000  # each link wraps within a second
    gpus = GpuSampler(nvml)
    first = gpus.sample(0)
    clock.now = 1.0
    second = gpus.sample(1_000_000_000)
    assert first[0]["nvlink_tx_gbps"] is None  # no previous sample yet: missing, not zero
    links = len(nvml.gpus[0].nvlinks)  # 18: the rate is the sum over every link
    per_link = nvml.gpus[0].nvlink_kib_per_s * 1024 / 1e9
    assert second[0]["nvlink_tx_gbps"] == pytest.approx(links * per_link)  # across the wrap
    assert second[0]["power_from_energy_w"] == pytest.approx(400.0)
    assert second[1]["throttled"] is True and second[0]["throttled"] is False
    assert decode_reasons(second[1]["clock_reasons"]) == ["hw_thermal"]
    assert second[2]["power_w"] is None and second[2]["ecc_uncorrected"] is None
    assert second[2]["gpu_util_pct"] == 50.0  # the rest of that GPU still sampled


# (clock event reasons, SM clock or None for the fake's own, expected flags): the bits as
# nvml.h documents them (group nvmlClocksEventReasons); the fake halves the clock for the three
# that nvml.h says reduce it "by a factor of 2 or more"
REASON_CASES = [
    (0x0, None, {"power_capped": False, "slowdown": False, "throttled": False}),
    (0x1 | 0x2, 210, {"clock_low": False, "throttled": False}),  # GpuIdle: low clock is idle
    (0x2, None, {"throttled": False}),  # ApplicationsClocksSetting
    (0x4, 1755, {"power_capped": True, "slowdown": False, "throttled": False}),  # SwPowerCap
    (0x4, 900, {"power_capped": True, "clock_low": True, "throttled": True}),  # capped to <50%
    (0x8, None, {"slowdown": True, "clock_low": True, "throttled": True}),  # HwSlowdown
    (0x10, None, {"throttled": False}),  # SyncBoost
    (0x20, 1600, {"slowdown": True, "clock_low": False, "throttled": True}),  # SwThermal
    (0x40, None, {"slowdown": True, "throttled": True}),  # HwThermalSlowdown
    (0x80, None, {"slowdown": True, "throttled": True}),  # HwPowerBrakeSlowdown
    (0x100, None, {"throttled": False}),  # DisplayClockSetting
]


@pytest.mark.parametrize(("reasons", "sm_mhz", "expected"), REASON_CASES)
def test_each_clock_event_reason_is_kept_apart(
    reasons: int, sm_mhz: int | None, expected: dict[str, bool]
) -> None:
    """Power capping is recorded, not held against a case; a slowdown reason or a busy clock
    under half the applications clock makes the sample untrusted (`throttled`)."""
    nvml = FakeNVML.dgx(1)
    nvml.gpus[0].clock_reasons, nvml.gpus[0].sm_clock_mhz = reasons, sm_mhz
    (row,) = GpuSampler(nvml).sample(0)
    assert {key: row[key] for key in expected} == expected
    assert row["app_clock_mhz"] == 1980 and row["clock_reasons"] == reasons
    if reasons in (0x8, 0x40, 0x80):
        assert row["sm_clock_mhz"] == 990  # "by a factor of 2 or more"


def test_without_applications_clocks_the_maximum_clock_serves() -> None:
    nvml = FakeNVML.dgx(1)
    nvml.gpus[0].unsupported = {"nvmlDeviceGetApplicationsClock"}
    nvml.gpus[0].max_clock_mhz, nvml.gpus[0].sm_clock_mhz = 1410, 600
    nvml.gpus[0].clock_reasons = 0x4
    (row,) = GpuSampler(nvml).sample(0)
    assert row["app_clock_mhz"] == 1410 and row["clock_low"] is True and row["throttled"]


def test_a_power_capped_case_is_shown_not_untrusted() -> None:
    """Attribution: a case whose GPU sat at its power limit has its share of capped samples
    and clocks, and stays trusted; one with a thermal slowdown is not."""
    nvml = FakeNVML.dgx(2)
    nvml.gpus[0].clock_reasons, nvml.gpus[0].sm_clock_mhz = 0x4, 1700
    gpus = GpuSampler(nvml)
    rows = [{**r, "t_ns": t, "host": "h"} for t in range(10) for r in gpus.sample(t)]
    capped = pd.DataFrame([r for r in rows if r["source"] == "gpu0"])
    window = pd.DataFrame(
        [{"probe": "compute", "case_id": "bf16", "scope": "single", "host": "h", "start_ns": 0,
          "end_ns": 9, "duration_s": 1.0, "expected_tx_bytes": np.nan}]
    )  # fmt: skip
    (case,) = attribute(window, capped).to_dict("records")
    assert case["power_capped_pct"] == 100.0 and case["throttled"] is False
    assert case["sm_clock_mhz"] == 1700 and case["app_clock_mhz"] == 1980
    nvml.gpus[1].clock_reasons = 0x20
    hot = pd.DataFrame([{**r, "t_ns": t, "host": "h"} for t in range(10) for r in gpus.sample(t)])
    (case,) = attribute(window, hot[hot["source"] == "gpu1"]).to_dict("records")
    assert case["throttled"] is True and case["clock_reasons_seen"] == "sw_thermal"


def test_without_nvml_the_sampler_samples_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nvml, why = sampler.open_nvml()
    if nvml is not None:
        pytest.skip("this machine has NVML")
    out = tmp_path / "node-x.jsonl"
    count = sampler.run(out, 10.0, "x", duration_s=2.0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["source"] for r in rows} >= {"host", "nic:lo"}
    # the busiest core and the pegged ones, not a row per core (224 on a DGX node)
    for host in (r for r in rows if r["source"] == "host"):
        assert 0 <= host["cpu_pct"] <= host["cpu_max_pct"] <= 100 and host["cpu_busy_cores"] >= 0
    assert not any(r["source"].startswith("cpu") for r in rows)
    assert not any(r["source"].startswith("gpu") for r in rows)
    assert "NVML unavailable" in capsys.readouterr().err and why
    host_times = [r["t_ns"] for r in rows if r["source"] == "host"]
    rate = 1e9 / statistics.median(np.diff(host_times))
    print(f"\nhost samples: {count} in 2 s, median rate {rate:.2f} Hz")
    assert count >= 18 and rate >= 9.0


def _telemetry(throttle_at: float) -> pd.DataFrame:
    rows = []
    for i in range(21):  # 2 s at 10 Hz
        t = int(i * 1e8)
        rows.append(
            {
                "t_ns": t,
                "host": "h",
                "source": "nic:eth0",
                "tx_bytes": 1000 * i,
                "tx_gbps": 1e-5,
                "rx_gbps": 1e-5,
            }
        )
        rows.append({"t_ns": t, "host": "h", "source": "nic:lo", "tx_bytes": 10**9 * i})
        rows.append(
            {
                "t_ns": t,
                "host": "h",
                "source": "gpu0",
                "gpu_util_pct": 90.0,
                "power_w": 300.0,
                "throttled": t >= throttle_at * 1e9,
            }
        )
    return pd.DataFrame(rows)


def _cases() -> pd.DataFrame:
    base = {
        "probe": "collectives",
        "scope": "inter",
        "world_size": 2,
        "group": "rail0",
        "host": "h",
        "op": "sendrecv",
        "size_bytes": 100,
        "warmup_iters": 1,
        "nwrong": 0,
    }
    rows = []
    for case, (start, end) in {"a": (0.25, 0.75), "b": (1.25, 1.75)}.items():
        for it in range(3):
            rows.append(
                {
                    **base,
                    "case_id": case,
                    "rank": 0,
                    "group_rank": 0,
                    "iteration": it,
                    "start_unix_ns": int(start * 1e9),
                    "end_unix_ns": int(end * 1e9),
                }
            )
    return pd.DataFrame(rows)


def test_attribution_interpolates_bytes_and_flags_throttling() -> None:
    windows = case_windows(_cases())
    assert windows["expected_tx_bytes"].tolist() == [500.0, 500.0]  # (1 + 1 + 3) x 100
    out = attribute(windows, _telemetry(throttle_at=1.0)).set_index("case_id")
    assert out.loc["a", "nic_tx_bytes"] == pytest.approx(5000)  # 0.5 s x 10 kB/s, lo excluded
    assert out.loc["a", "nic_ratio"] == pytest.approx(10.0)
    assert not out.loc["a", "throttled"] and out.loc["b", "throttled"]
    assert out.loc["a", "gpu_util_pct"] == 90.0 and out.loc["a", "power_w"] == 300.0


def test_attribution_of_many_hosts_matches_each_window_read_by_hand() -> None:
    """Three hosts sampled at their own times (2 GPUs each, one with NaN values, random
    reasons and flags, a host without GPUs, samples out of order), windows listed in no
    order: each window's numbers equal those computed from its own samples directly."""
    rng = np.random.default_rng(7)
    rows = []
    for h, host in enumerate(["a", "b", "c"]):
        for i in rng.permutation(40):
            t = int(h * 3 + i * 10)
            rows.append({"t_ns": t, "host": host, "source": "nic:eth0", "tx_bytes": 7.0 * t})
            if host == "c":
                continue
            for gpu in ("gpu0", "gpu1"):
                rows.append(
                    {
                        "t_ns": t, "host": host, "source": gpu,
                        "gpu_util_pct": np.nan if rng.random() < 0.2 else rng.uniform(0, 100),
                        "power_w": rng.uniform(100, 700),
                        "throttled": bool(rng.random() < 0.1),
                        "power_capped": bool(rng.random() < 0.3),
                        "clock_reasons": int(rng.choice([0, 0, 0, 4, 8, 32, 36])),
                    }
                )  # fmt: skip
    telemetry = pd.DataFrame(rows)
    starts = rng.integers(0, 350, 30)
    windows = pd.DataFrame(
        {
            "host": rng.choice(["a", "b", "c"], 30),
            "case_id": [f"w{i}" for i in range(30)],
            "start_ns": starts,
            "end_ns": starts + rng.integers(0, 60, 30),
            "expected_tx_bytes": 100.0,
        }
    ).set_axis(rng.permutation(30) + 100)  # labels in no order
    windows["duration_s"] = (windows["end_ns"] - windows["start_ns"]) / 1e9
    out = attribute(windows, telemetry)
    assert out["case_id"].tolist() == windows["case_id"].tolist()
    for window, got in zip(windows.to_dict("records"), out.to_dict("records"), strict=True):
        mine = telemetry[
            (telemetry["host"] == window["host"])
            & telemetry["t_ns"].between(window["start_ns"], window["end_ns"])
            & telemetry["source"].str.startswith("gpu")
        ]
        assert got["num_gpu_samples"] == len(mine)
        per_instant = mine.groupby("t_ns")
        util = per_instant["gpu_util_pct"].mean().mean()  # NaN without any value
        power = per_instant["power_w"].sum().mean()
        assert got["gpu_util_pct"] == pytest.approx(util, nan_ok=True)
        assert got["power_w"] == pytest.approx(power, nan_ok=True)
        assert got["throttled"] == bool(mine["throttled"].any())
        capped = 100 * mine["power_capped"].sum() / len(mine) if len(mine) else np.nan
        assert got["power_capped_pct"] == pytest.approx(capped, nan_ok=True)
        mask = int(np.bitwise_or.reduce(mine["clock_reasons"].astype(int))) if len(mine) else 0
        reasons = sorted(r for r in decode_reasons(mask) if r != "sw_power_cap")
        assert got["clock_reasons_seen"] == ",".join(reasons)
        assert got["nic_tx_bytes"] == pytest.approx(7.0 * (window["end_ns"] - window["start_ns"]))


def test_node_series_decimates() -> None:
    frame = pd.concat([_telemetry(throttle_at=1.0)] * 1)
    series = node_series(frame, "h", max_points=5)
    assert len(series) == 5 and series["throttled"].tolist()[-1]
    assert "network_gbps" in series.columns and "gpu_util_pct" in series.columns


def test_nodes_series_keeps_each_node_to_what_it_measured() -> None:
    """Every node aggregated at once: per node and sample time the CPU mean, GPU power summed
    over the node's GPUs, NIC throughput summed over NICs and directions; a node without GPU
    samples has no GPU series (not zeros borrowed from another node), and a node that samples
    at other times keeps its own times."""
    rows = []
    for t in range(4):
        rows += [
            {"host": "a", "t_ns": t, "source": "host", "cpu_pct": 10.0 * t},
            {"host": "a", "t_ns": t, "source": "gpu0", "power_w": 100.0, "throttled": t == 3},
            {"host": "a", "t_ns": t, "source": "gpu1", "power_w": 50.0, "throttled": False},
            {"host": "a", "t_ns": t, "source": "nic:eth0", "tx_gbps": 1.0, "rx_gbps": 2.0},
            {"host": "b", "t_ns": 10 + t, "source": "host", "cpu_pct": 50.0},
            {"host": "b", "t_ns": 10 + t, "source": "nic:lo", "tx_gbps": 9.0, "rx_gbps": 9.0},
        ]
    series = nodes_series(pd.DataFrame(rows))
    a, b = series["a"], series["b"]
    assert a["t_ns"].tolist() == [0, 1, 2, 3] and b["t_ns"].tolist() == [10, 11, 12, 13]
    assert a["cpu_pct"].tolist() == [0.0, 10.0, 20.0, 30.0] and b["cpu_pct"].eq(50).all()
    assert a["power_w"].eq(150).all() and a["network_gbps"].eq(3).all()
    assert a["throttled"].tolist() == [False, False, False, True]
    assert {"power_w", "throttled", "network_gbps"}.isdisjoint(b.columns)  # lo is no network
    pd.testing.assert_frame_equal(node_series(pd.DataFrame(rows), "b"), b)


def test_sweep_records_telemetry_at_10_hz(tmp_path: Path, gp: Gp) -> None:
    result = gp(
        "run",
        "collectives",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--op",
        "all_reduce",
        "--sizes",
        "4M",
        "--budget-ms",
        "3000",
        "--min-iters",
        "3",
    )
    assert result.code == 0, result.err
    run = open_run("latest", tmp_path)
    telemetry = run.table("telemetry")
    host = telemetry[telemetry["source"] == "host"].sort_values("t_ns")
    rate = 1e9 / statistics.median(np.diff(host["t_ns"].to_numpy()))
    span_s = (host["t_ns"].max() - host["t_ns"].min()) / 1e9
    print(f"\nsweep telemetry: {len(host)} host samples over {span_s:.1f} s, median {rate:.2f} Hz")
    # the sampler starts beside the ranks and, on a busy machine, late (once 1 s of a 1.5 s
    # case): ask for no gap in what it sampled, not for a number the start decides
    assert rate >= 9.0 and len(host) >= 5
    assert len(host) >= 0.9 * span_s * 10
    assert "counters during the run" in (run.path / "report.html").read_text()
    off = gp(
        "run",
        "collectives",
        "--gpus",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
        "--op",
        "all_reduce",
        "--sizes",
        "4K",
        "--budget-ms",
        "5",
        "--no-telemetry",
    )
    assert off.code == 0 and "telemetry" not in open_run("latest", tmp_path).tables()


def test_infiniband_counters_are_4_byte_words(tmp_path: Path) -> None:
    from gpuprof.telemetry.host import HostSampler, ib_counters

    port = tmp_path / "mlx5_0" / "ports" / "1" / "counters"
    port.mkdir(parents=True)
    (port / "port_xmit_data").write_text("1000\n")
    (port / "port_rcv_data").write_text("250\n")
    assert ib_counters(tmp_path) == {"mlx5_0/1": (4000, 1000)}
    host = HostSampler(ib_root=tmp_path)
    host.sample(0)
    (port / "port_xmit_data").write_text("1250001000\n")  # +5 GB in 1 s
    row = next(r for r in host.sample(1_000_000_000) if r["source"] == "ib:mlx5_0/1")
    assert row["tx_bytes"] == 5_000_004_000 and row["tx_gbps"] == pytest.approx(5.0)
