"""Peak FLOP/s by GPU model and precision: the table the trainer wheel ships
(`foxhunt_trainer/contract/peak_flops.json`, read by `foxhunt_trainer.contract.peak_flops`).

The model FLOPs utilization rules (`observability.rules.goodput`) read it through
`ObservabilityConfig.peak_flops`, the trainer's end-of-run summary reads the same file, so the
two MFU figures share one denominator.
"""

from __future__ import annotations

from foxhunt_trainer.contract.peak_flops import (
    DEFAULT_PEAK_FLOPS,
    PEAK_FLOPS_FILE,
    PRECISIONS,
    TERA,
    GpuPeak,
    PeakFlopsError,
    PeakFlopsTable,
    load_peak_flops,
    parse_peak_flops,
)

__all__ = [
    "DEFAULT_PEAK_FLOPS",
    "PEAK_FLOPS_FILE",
    "PRECISIONS",
    "TERA",
    "GpuPeak",
    "PeakFlopsError",
    "PeakFlopsTable",
    "load_peak_flops",
    "parse_peak_flops",
]
