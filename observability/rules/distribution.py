"""Fleet quantiles that compose across shards: a value histogram and the quantile of its buckets.

`quantile(0.5, x)` over every GPU of the fleet needs all the values in one place: it cannot be
computed from per-shard parts. Its composable form counts the GPUs per value bucket,

    count_values("bucket", ceil(x / width))         one series per bucket that holds a GPU

which each shard computes for its own GPUs and the global tier sums by `bucket` (`pushdown`), and
takes the quantile of the cumulative counts (`histogram_quantile` over `le` = bucket x width),
interpolating linearly within the bucket, as for any Prometheus histogram. The estimate is within
one bucket width of the exact median (`ValueGrid.width`: 2 percentage points, 2 Celsius, 50 MHz),
and one server computes exactly the same estimate as the sharded tiers: the fleet medians are
defined this way everywhere (`rules.yaml` too), so a stack's dashboards do not change when it is
sharded. Values above the grid's top count in the `+Inf` bucket only.

`value_histogram(record, expr, grid)` is the bucket counts' recording rule, `fleet_quantile(q,
histogram, grid)` the quantile's expression over that record.
"""

from __future__ import annotations

from dataclasses import dataclass

from observability.rules.model import RecordingRule

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
        return int(round(self.top / self.width))

    def bound(self, index: int) -> str:
        value = index * self.width
        return str(int(value)) if float(value).is_integer() else repr(value)


PERCENT_GRID = ValueGrid(width=2, top=100)
CELSIUS_GRID = ValueGrid(width=2, top=120)
HERTZ_GRID = ValueGrid(width=50e6, top=3.5e9)


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


def value_histogram(record: str, expr: str, grid: ValueGrid, help_text: str) -> RecordingRule:
    """The number of series of `expr` in each bucket of `grid` (label `bucket`: the bucket's index)."""
    return RecordingRule(record, f'count_values("{BUCKET_LABEL}", ceil(({expr}) / {grid.bound(1)}))', help_text)


def fleet_quantile(q: float, histogram: RecordingRule, grid: ValueGrid) -> str:
    """The `q`-quantile of the values `histogram` (a `value_histogram`) counted, interpolated."""
    name = histogram.record
    # A bucket no GPU falls in counts 0 (not absent), so that the quantile interpolates within the
    # bucket that holds it rather than from 0.
    terms = [
        f'label_replace(sum({name}{{{BUCKET_LABEL}=~"{integer_range_regex(i)}"}}) or 0 * sum({name}), '
        f'"le", "{grid.bound(i)}", "", "")'
        for i in range(grid.buckets + 1)
    ]
    terms.append(f'label_replace(sum({name}), "le", "+Inf", "", "")')
    return f"histogram_quantile(\n  {q},\n  " + "\n  or\n  ".join(terms) + "\n)"
