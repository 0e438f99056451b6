"""Fleet quantiles that compose across shards: a value histogram and the quantile of its buckets.

`quantile(0.5, x)` over every GPU of the fleet needs all the values in one place: it cannot be
computed from per-shard parts. Its composable form counts the GPUs per value bucket,

    count_values("bucket", ceil(x / width))         one series per bucket that holds a GPU

which each shard computes for its own GPUs and the global tier sums by `bucket` (`pushdown`), and
takes the quantile of the cumulative counts (`histogram_quantile` over `le` = bucket x width),
interpolating linearly within the bucket, as for any Prometheus histogram. The estimate is within
the bucket holding the value at the quantile's rank (`ValueGrid.width`: 5 percentage points, 5 Celsius,
100 MHz), so within a bucket of the exact median of a fleet of thousands of GPUs,
and values above the grid's top count in the `+Inf` bucket only. One server keeps the exact
`quantile()` (`rules.yaml`); the shard and global tiers of a sharded stack estimate it this way
(`pushdown` rewrites every fleet-wide `quantile()` over a metric whose unit has a grid,
`GRIDS_BY_UNIT`), so a sharded stack's fleet medians may differ from one server's by up to a
bucket (the promtool proof in tests/rules/test_pushdown.py checks both).

`value_histogram(expr, grid)` is the shards' partial, `fleet_quantile(q, histogram, grid)` the
global tier's quantile over the partials.
"""

from __future__ import annotations

from dataclasses import dataclass

BUCKET_LABEL = "bucket"


@dataclass(frozen=True)
class ValueGrid:
    """Buckets (0, width], (width, 2 width], ... up to `top`, then +Inf."""

    width: float
    top: float

    def __post_init__(self) -> None:
        if self.width <= 0 or self.top < self.width:
            raise ValueError(f"a value grid needs 0 < width <= top, got width {self.width} and top {self.top}")

    @property
    def buckets(self) -> int:
        return round(self.top / self.width)

    def bound(self, index: int) -> str:
        value = index * self.width
        return str(int(value)) if float(value).is_integer() else repr(value)


PERCENT_GRID = ValueGrid(width=5, top=100)
CELSIUS_GRID = ValueGrid(width=5, top=120)
HERTZ_GRID = ValueGrid(width=100e6, top=3.5e9)


def integer_range_regex(top: int) -> str:
    """An RE2 pattern matching exactly the decimal integers 0..`top` (no leading zeros)."""
    if top < 0:
        raise ValueError(f"integer_range_regex needs top >= 0, got {top}")
    digits = str(top)
    n = len(digits)
    parts = []
    for length in range(1, n):  # every shorter number
        parts.append("[0-9]" if length == 1 else "[1-9]" + "[0-9]" * (length - 1))
    for i, d in enumerate(digits):  # n digits: same prefix, a smaller digit here, anything after
        low = 1 if i == 0 and n > 1 else 0
        high = int(d) - 1
        if high >= low:
            span = str(low) if high == low else f"[{low}-{high}]"
            parts.append(digits[:i] + span + "[0-9]" * (n - i - 1))
    parts.append(digits)
    return "|".join(parts)


def value_histogram(expr: str, grid: ValueGrid) -> str:
    """The number of series of `expr` in each bucket of `grid` (label `bucket`: the bucket's index)."""
    return f'count_values("{BUCKET_LABEL}", ceil(({expr}) / {grid.bound(1)}))'


def fleet_quantile(q: str, histogram: str, grid: ValueGrid) -> str:
    """The `q`-quantile of the values the series `histogram` (`value_histogram`, from every shard)
    counted, interpolated within its bucket."""
    # A bucket no GPU falls in counts 0 (not absent), so that the quantile interpolates within the
    # bucket that holds it rather than from the last boundary below; without any GPU there is no
    # +Inf bucket, and no answer (`and`), as `quantile()` of nothing has none.
    terms = [
        f'label_replace(sum({histogram}{{{BUCKET_LABEL}=~"{integer_range_regex(i)}"}}) or vector(0), '
        f'"le", "{grid.bound(i)}", "", "")'
        for i in range(grid.buckets + 1)
    ]
    terms.append(f'label_replace(sum({histogram}), "le", "+Inf", "", "")')
    return f"(histogram_quantile({q}, " + " or ".join(terms) + f") and on () count({histogram}))"


GRIDS_BY_UNIT = {"percent": PERCENT_GRID, "celsius": CELSIUS_GRID, "hertz": HERTZ_GRID}
