"""GPU hardware error panels: ECC, XID and hardware errors over the fleet (recorded rates), and the
GPUs that have them. `gpus` is the dashboard's GPU matchers (e.g. its `$node`); a "with errors"
table lists the `top` worst GPUs now."""

from __future__ import annotations

from dashboards.panels import (
    ERRORS,
    GREEN,
    RED,
    ColourSteps,
    Common,
    PanelBuilder,
    Query,
    ThresholdStyle,
    stat,
    timeseries,
    worst_now,
)
from foxhunt_trainer.contract import catalog
from observability import promql
from observability.rules import dashboard_recording as rec
from observability.rules.rule_types import RecordingRule

HARDWARE_ERRORS = ColourSteps(GREEN, ((0.01, RED),))  # red above 0.01 errors/s


def _per_second(title: str, description: str, rule: RecordingRule, label: str, w: int) -> PanelBuilder:
    return timeseries(
        Common(title, description, "cps", w=w, min=0, thresholds=ERRORS),
        [Query(rule.record, f"{{{{{label}}}}}")],
        threshold_style=ThresholdStyle.AREA,
    )


def ecc_errors(*, w: int) -> PanelBuilder:
    return _per_second(
        "ECC Errors",
        "ECC errors per second over the fleet, corrected and uncorrected.",
        rec.GPU_ECC_ERRORS_RATE,
        "ecc_type",
        w,
    )


def xid_errors(*, w: int) -> PanelBuilder:
    return _per_second(
        "XID Errors",
        "XID error events per second over the fleet, by XID code (codes that occurred).",
        rec.GPU_XID_ERRORS_RATE,
        "xid",
        w,
    )


def errors_by_type(*, w: int) -> PanelBuilder:
    return _per_second(
        "GPU Errors by Type",
        "GPU hardware errors per second over the fleet (xid, ecc_uncorrected, gpu_lost).",
        rec.GPU_ERRORS_RATE,
        "error_type",
        w,
    )


def errors_now(*, w: int) -> PanelBuilder:
    """The fleet's hardware error rate by type, as big numbers (the highest of the range)."""
    return stat(
        Common(
            "GPU Errors",
            "CRITICAL: GPU hardware errors per second; red above 0.01 errors/s.",
            "cps",
            w=w,
            thresholds=HARDWARE_ERRORS,
            decimals=3,
        ),
        [Query(rec.GPU_ERRORS_RATE.record, "{{error_type}}")],
        calcs=("max",),
        background=True,
    )


def _gpus_with(title: str, what: str, metric: catalog.Metric, gpus: tuple[str, ...], top: int, w: int) -> PanelBuilder:
    per_gpu = promql.aggregate("sum", ("node", "gpu_id"), promql.rate(metric, gpus))
    return worst_now(
        title,
        f"The {top} GPUs with the most {what} per second now (only GPUs that have any).",
        "cps",
        f"{per_gpu} > 0",
        top,
        w=w,
    )


def gpus_with_ecc_errors(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return _gpus_with("GPUs with ECC Errors", "ECC errors", catalog.GPU_ECC_ERRORS_TOTAL, gpus, top, w)


def gpus_with_xid_errors(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return _gpus_with("GPUs with XID Errors", "XID errors", catalog.GPU_XID_ERRORS_TOTAL, gpus, top, w)


def gpus_with_hardware_errors(gpus: tuple[str, ...], top: int, *, w: int) -> PanelBuilder:
    return _gpus_with(
        "GPUs with Hardware Errors", "hardware errors of any type", catalog.GPU_ERRORS_TOTAL, gpus, top, w
    )
