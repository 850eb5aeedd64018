"""What NVML's clock event reasons mean for a measurement (nvml.h, group
nvmlClocksEventReasons), with no NVML import: the sampler records them and the analysis
reads them. A GPU at its power limit is in its normal state under load (shown, not held
against a case); a hardware slowdown, a thermal slowdown, a power brake, or a busy clock under
half the applications clock means something is wrong (the case cannot be trusted)."""

from __future__ import annotations

from typing import Any

# nvmlDeviceGetCurrentClocksEventReasons bits, as nvml.h documents them (group
# nvmlClocksEventReasons; "Throttle" in the older names):
GPU_IDLE = 0x1  # "Nothing is running on the GPU and the clocks are dropping to Idle state"
SW_POWER_CAP = 0x4  # "The clocks have been optimized to ensure not to exceed currently set
# power limits": a busy GPU at its power limit, its normal state under a heavy load
HW_SLOWDOWN = 0x8  # "HW Slowdown (reducing the core clocks by a factor of 2 or more) is
# engaged": temperature too high, external power brake, or power draw too high (Fast Trigger)
SW_THERMAL = 0x20  # clocks lowered so the GPU / memory stays under its max operating temp
HW_THERMAL = 0x40  # "HW Thermal Slowdown (reducing the core clocks by a factor of 2 or more)"
HW_POWER_BRAKE = 0x80  # "HW Power Brake Slowdown (... factor of 2 or more)": an external
# power brake assertion (e.g. by the system power supply)
# what a case's numbers cannot be trusted under: something is wrong with cooling or power
SLOWDOWN_REASONS = {
    HW_SLOWDOWN: "hw_slowdown",
    SW_THERMAL: "sw_thermal",
    HW_THERMAL: "hw_thermal",
    HW_POWER_BRAKE: "hw_power_brake",
}
SLOWDOWN_MASK = sum(SLOWDOWN_REASONS)
NAMED_REASONS = {SW_POWER_CAP: "sw_power_cap", **SLOWDOWN_REASONS}
# a busy GPU whose SM clock is at or under this share of its applications clock is as slow as a
# hardware slowdown ("a factor of 2 or more"), whatever the reason bits say
CLOCK_FLOOR = 0.5
NVML_CLOCK_SM = 1  # nvmlClockType_t: GRAPHICS 0, SM 1, MEM 2


def decode_reasons(reasons: int | None) -> list[str]:
    """Names of the power and slowdown reasons set in a clock-event bitmask."""
    if not reasons:
        return []
    return [name for bit, name in NAMED_REASONS.items() if reasons & bit]


def clock_flags(reasons: int | None, sm_mhz: float | None, app_mhz: float | None) -> dict[str, Any]:
    """One sample's clock state: `power_capped` (at the power limit: shown, not held against
    a case), `slowdown` (a reason that means cooling or power is wrong), `clock_low` (busy,
    yet under CLOCK_FLOOR of the applications clock) and `throttled` (slowdown or clock_low:
    the case cannot be trusted). None where NVML does not say."""
    if reasons is None:
        return dict.fromkeys(("power_capped", "slowdown", "clock_low", "throttled"))
    busy = not reasons & GPU_IDLE
    low = None if not sm_mhz or not app_mhz else busy and sm_mhz <= CLOCK_FLOOR * app_mhz
    slowdown = bool(reasons & SLOWDOWN_MASK)
    return {
        "power_capped": bool(reasons & SW_POWER_CAP),
        "slowdown": slowdown,
        "clock_low": low,
        "throttled": slowdown or bool(low),
    }
