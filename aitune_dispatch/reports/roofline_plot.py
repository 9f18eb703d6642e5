"""Where the sampled calls sit under the GPU's roofs: the report's roofline chart, as SVG coordinates.

The analysis is ``views.roofline_samples`` (rates, bounds, fractions); this module only places it on a
log-log plane (intensity in FLOP/byte across, FLOP/s up) for the template to draw: one point per
sample whose FLOPs are known, its area proportional to its kernel time, and the two roofs of the
device, the bandwidth's slope and the peak of the dtype with the most kernel time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

WIDTH, HEIGHT = 640.0, 320.0
MARGIN_LEFT, MARGIN_BOTTOM, MARGIN_TOP, MARGIN_RIGHT = 84.0, 40.0, 12.0, 16.0
MAX_RADIUS = 14.0


@dataclass(frozen=True)
class Point:
    """One sample on the chart."""

    x: float
    y: float
    r: float
    function: str
    label: str


@dataclass(frozen=True)
class RooflineChart:
    """The chart's points, roofs (as an SVG polyline) and decade ticks, in pixels."""

    points: list[Point]
    roof: str
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    dtype: str
    width: float = WIDTH
    height: float = HEIGHT
    left: float = MARGIN_LEFT
    top: float = MARGIN_TOP
    right: float = WIDTH - MARGIN_RIGHT
    bottom: float = HEIGHT - MARGIN_BOTTOM


def _decades(low: float, high: float) -> tuple[int, int]:
    return math.floor(math.log10(low)), math.ceil(math.log10(high))


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g} {prefix}{unit}"
    return f"{value:g} {unit}"


def chart(samples: pd.DataFrame) -> RooflineChart | None:
    """The chart of ``samples`` (``samples(roofline=True)``), or None where no sample can be placed.

    Parameters
    ----------
    samples:
        The per-sample roofline rows.

    Returns
    -------
    RooflineChart or None
        None where no sample has both a known intensity and a known device limit.
    """
    placed = samples[(samples["intensity"] > 0) & (samples["flop_per_s"] > 0) & samples["peak_flop_per_s"].notna()]
    if placed.empty:
        return None
    main = str(placed.groupby("dtype")["kernel_us"].sum().idxmax())  # the roof of the dtype with most time
    peak = float(placed.loc[placed["dtype"] == main, "peak_flop_per_s"].iloc[0])
    bandwidth = float(placed["peak_bytes_per_s"].iloc[0])
    ridge = peak / bandwidth
    x_low, x_high = _decades(min(placed["intensity"].min(), ridge) / 2, max(placed["intensity"].max(), ridge) * 2)
    y_low, y_high = _decades(placed["flop_per_s"].min() / 2, peak * 2)
    span_x, span_y = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def px(intensity: float) -> float:
        return MARGIN_LEFT + (math.log10(intensity) - x_low) / (x_high - x_low) * span_x

    def py(rate: float) -> float:
        return MARGIN_TOP + (y_high - math.log10(rate)) / (y_high - y_low) * span_y

    left = 10.0**x_low
    start_rate = max(left * bandwidth, 10.0**y_low)
    start = start_rate / bandwidth
    roof = f"{px(start):.1f},{py(start_rate):.1f} {px(ridge):.1f},{py(peak):.1f} {px(10.0**x_high):.1f},{py(peak):.1f}"
    largest = float(placed["kernel_us"].max())
    points = [
        Point(
            px(float(row.intensity)),
            py(float(row.flop_per_s)),
            max(2.5, MAX_RADIUS * math.sqrt(float(row.kernel_us) / largest)) if largest > 0 else 2.5,
            str(row.function_name),
            f"{row.function_name} sample {int(row.sample)}: {_si(float(row.flop_per_s), 'FLOP/s')} at "
            f"{float(row.intensity):.3g} FLOP/byte, {100 * float(row.fraction_of_bound):.1f}% of its bound, "
            f"{float(row.kernel_us):.1f} µs",
        )
        for row in placed.sort_values("kernel_us", ascending=False).itertuples()
    ]
    x_ticks = [(px(10.0**d), _si(10.0**d, "")) for d in range(x_low, x_high + 1)]
    y_ticks = [(py(10.0**d), _si(10.0**d, "FLOP/s")) for d in range(y_low, y_high + 1)]
    return RooflineChart(points, roof, x_ticks, y_ticks, main)
