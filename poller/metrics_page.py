"""The poller's `/metrics` page in the Prometheus text format (0.0.4), written fast.

A prometheus-client collector with `generate_latest` produces the same page (the tests parse
both and compare), but builds a dict and a namedtuple per sample and format every
label on every scrape: several microseconds a sample. Here every GPU's label block is escaped
once, when the GPU is first seen (with `foxhunt_trainer.contract.exposition`'s pieces, the one place that
knows the format), and a sample line is one string concatenation, which keeps a full 8-GPU page
well under the cost of spawning one process. The page carries no exemplars, so the poller offers
only the text format whatever the scraper asks for.
"""

from __future__ import annotations

import operator
from typing import TypeVar

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.exposition import format_value, label_block, series_prefix, text_header
from poller.error_counters import CountersSnapshot
from poller.exported_metrics import ECC_TYPES, GPU_COUNTERS, GPU_GAUGES, INTERCONNECT_COUNTERS, THROTTLE_REASONS
from poller.samples import GpuIdentity, PassResult
from poller.shared_pass import gpu_label_values


def _header(metric: catalog.Metric) -> str:
    kind = "gauge" if metric.type is catalog.MetricType.INFO else metric.type.value
    return text_header(metric.name, metric.help, kind)


def _labels(names: tuple[str, ...], values: list[str]) -> str:
    return label_block(zip(names, values, strict=True))


class _GpuLines:
    """Every line prefix (`name{labels} `) of one GPU, escaped once."""

    def __init__(self, node: str, gpu: GpuIdentity) -> None:
        values = gpu_label_values(node, gpu)
        base = _labels(catalog.GPU, values)
        self.gauges = tuple(series_prefix(metric.name, base) for metric, _ in GPU_GAUGES)  # GPU_GAUGES order
        self.counters = tuple(series_prefix(metric.name, base) for metric, _ in GPU_COUNTERS)
        self.throttle = tuple(
            (bit, series_prefix(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, f"{base},{label_block([('reason', reason)])}"))
            for reason, bit in THROTTLE_REASONS
        )
        self.ecc = tuple(
            (
                attribute,
                series_prefix(catalog.GPU_ECC_ERRORS_TOTAL.name, f"{base},{label_block([('ecc_type', ecc_type)])}"),
            )
            for ecc_type, attribute in ECC_TYPES
        )
        self.interconnect = tuple(  # _INTERCONNECT_VALUES order
            series_prefix(metric.name, f"{base},{label_block([('direction', direction)])}")
            for metric, directions in INTERCONNECT_COUNTERS
            for direction, _ in directions
        )
        mig = gpu.mig
        # A MIG device's info and SM share lines (fixed for its life); empty for a whole GPU.
        if mig is not None:
            parent = label_block([("parent_gpu_id", str(gpu.index)), ("parent_uuid", mig.parent_uuid)])
            info = f"{base},{parent},{label_block([('profile', mig.profile)])}"
            self.mig_info = series_prefix(catalog.GPU_MIG_DEVICE_INFO.name, info) + "1\n"
            self.mig_share = (
                series_prefix(catalog.GPU_MIG_SM_SHARE_RATIO.name, base) + f"{format_value(mig.sm_share)}\n"
            )
        else:
            self.mig_info = self.mig_share = ""
        self._throttle_text: dict[int, str] = {}  # reason mask -> its 9 lines (masks rarely change)
        self.errors: dict[str, str] = {}
        self.xids: dict[int, str] = {}
        self._base = base

    def throttle_text(self, reasons: int) -> str:
        text = self._throttle_text.get(reasons)
        if text is None:
            if len(self._throttle_text) > 64:
                self._throttle_text.clear()
            text = self._throttle_text[reasons] = "".join(
                prefix + ("1\n" if reasons & bit else "0\n") for bit, prefix in self.throttle
            )
        return text

    def error_prefix(self, error_type: str) -> str:
        return _labelled_prefix(self.errors, error_type, catalog.GPU_ERRORS_TOTAL.name, self._base, "error_type")

    def xid_prefix(self, code: int) -> str:
        return _labelled_prefix(self.xids, code, catalog.GPU_XID_ERRORS_TOTAL.name, self._base, "xid")


_Key = TypeVar("_Key", str, int)


def _labelled_prefix(cache: dict[_Key, str], key: _Key, metric: str, base: str, label: str) -> str:
    """`metric{<base>,<label>="<key>"} ` for a sample line, built once per key and kept in `cache`."""
    prefix = cache.get(key)
    if prefix is None:
        prefix = cache[key] = series_prefix(metric, f"{base},{label_block([(label, str(key))])}")
    return prefix


_GAUGE_HEADERS = tuple(_header(metric) for metric, _ in GPU_GAUGES)
# One C call per GPU reads every gauge (and every interconnect counter) of its sample.
_GAUGE_VALUES = operator.attrgetter(*(attribute for _, attribute in GPU_GAUGES))
_COUNTER_HEADERS = tuple((_header(metric), attribute) for metric, attribute in GPU_COUNTERS)
_THROTTLE_HEADER = _header(catalog.GPU_CLOCK_THROTTLE_ACTIVE)
_ECC_HEADER = _header(catalog.GPU_ECC_ERRORS_TOTAL)
_INTERCONNECT_VALUES = operator.attrgetter(
    *(attribute for _, directions in INTERCONNECT_COUNTERS for _, attribute in directions)
)
_INTERCONNECT_FAMILIES: tuple[tuple[str, range], ...] = tuple(
    (
        _header(metric),
        range(
            sum(len(d) for _, d in INTERCONNECT_COUNTERS[:index]),
            sum(len(d) for _, d in INTERCONNECT_COUNTERS[: index + 1]),
        ),
    )
    for index, (metric, _) in enumerate(INTERCONNECT_COUNTERS)
)
_XID_HEADER = _header(catalog.GPU_XID_ERRORS_TOTAL)
_ERRORS_HEADER = _header(catalog.GPU_ERRORS_TOTAL)
_MIG_INFO_HEADER = _header(catalog.GPU_MIG_DEVICE_INFO)
_MIG_SHARE_HEADER = _header(catalog.GPU_MIG_SM_SHARE_RATIO)
_DRIVER_HEADER = _header(catalog.GPU_DRIVER_INFO)
_UP_HEADER = _header(catalog.GPU_POLLER_NVML_UP)
_DURATION_HEADER = _header(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS)
_FAILURES_HEADER = _header(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL)
_DEVICES_HEADER = _header(catalog.GPU_POLLER_DEVICES)
_ENUMERATED_HEADER = _header(catalog.GPU_POLLER_DEVICES_ENUMERATED)


class TextPageWriter:
    """Writes the page for one node; keeps each GPU's escaped label prefixes between scrapes.

    Safe to call from several threads at once.
    """

    def __init__(self, node: str) -> None:
        self._node = node
        self._gpus: dict[GpuIdentity, _GpuLines] = {}
        node_label = label_block([("node", node)])
        self._node_label = node_label
        self._up = series_prefix(catalog.GPU_POLLER_NVML_UP.name, node_label)
        self._duration = series_prefix(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name, node_label)
        self._devices = series_prefix(catalog.GPU_POLLER_DEVICES.name, node_label)
        self._enumerated = series_prefix(catalog.GPU_POLLER_DEVICES_ENUMERATED.name, node_label)
        self._failures: dict[str, str] = {}
        # Caches are replaced whole (one tuple), never updated in place: HTTP threads render
        # concurrently.
        self._counters_cache: tuple[CountersSnapshot, str, str] | None = None
        self._last_page: tuple[PassResult, CountersSnapshot, bytes] | None = None

    def _render_counters(self, counters: CountersSnapshot) -> tuple[str, str]:
        """(XID and GPU error families, collection failures family) as text."""
        xid_lines: list[str] = [_XID_HEADER]
        error_lines: list[str] = [_ERRORS_HEADER]
        for gpu_counts in counters.gpus:
            lines = self._lines(gpu_counts.gpu)
            for code, count in gpu_counts.xids:
                xid_lines.append(f"{lines.xid_prefix(code)}{count}\n")
            for error_type, count in gpu_counts.errors:
                error_lines.append(f"{lines.error_prefix(error_type)}{count}\n")
        failure_lines = [_FAILURES_HEADER]
        failure_lines += [f"{self._failure_prefix(reason)}{count}\n" for reason, count in counters.failures]
        return "".join(xid_lines + error_lines), "".join(failure_lines)

    def _failure_prefix(self, reason: str) -> str:
        metric = catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name
        return _labelled_prefix(self._failures, reason, metric, self._node_label, "reason")

    def _lines(self, gpu: GpuIdentity) -> _GpuLines:
        lines = self._gpus.get(gpu)
        if lines is None:
            lines = self._gpus[gpu] = _GpuLines(self._node, gpu)
        return lines

    def render(self, result: PassResult, counters: CountersSnapshot) -> bytes:
        """The page; the same bytes again while neither the pass nor the counters changed."""
        last = self._last_page
        if last is not None and last[0] is result and last[1] is counters:
            return last[2]
        page = self._render(result, counters)
        self._last_page = (result, counters, page)
        return page

    def _render(self, result: PassResult, counters: CountersSnapshot) -> bytes:
        out: list[str] = []
        append = out.append
        samples = [(sample, self._lines(sample.gpu)) for sample in result.samples]

        rows = [(_GAUGE_VALUES(sample), lines.gauges) for sample, lines in samples]
        for index, header in enumerate(_GAUGE_HEADERS):
            append(header)
            for values, prefixes in rows:
                value = values[index]
                if value is not None:
                    if type(value) is int:
                        text = str(value)
                    elif value - value == 0.0:  # a finite float (NaN and infinities give NaN)
                        text = repr(value)
                    else:
                        text = format_value(value)
                    append(f"{prefixes[index]}{text}\n")

        append(_THROTTLE_HEADER)
        for sample, lines in samples:
            reasons = sample.clock_event_reasons
            if reasons is not None:
                append(lines.throttle_text(reasons))

        append(_ECC_HEADER)
        for sample, lines in samples:
            for attribute, prefix in lines.ecc:
                value = getattr(sample, attribute)
                if value is not None:
                    append(f"{prefix}{value}\n")

        interconnect = [(_INTERCONNECT_VALUES(sample), lines.interconnect) for sample, lines in samples]
        for header, positions in _INTERCONNECT_FAMILIES:
            append(header)
            for values, prefixes in interconnect:
                for index in positions:
                    value = values[index]
                    if value is not None:
                        append(f"{prefixes[index]}{value}\n")

        for index, (header, attribute) in enumerate(_COUNTER_HEADERS):
            append(header)
            for sample, lines in samples:
                value = getattr(sample, attribute)
                if value is not None:
                    append(f"{lines.counters[index]}{format_value(value)}\n")

        append(_MIG_INFO_HEADER)
        append("".join(lines.mig_info for _, lines in samples))
        append(_MIG_SHARE_HEADER)
        append("".join(lines.mig_share for _, lines in samples))

        cached = self._counters_cache  # counters change rarely: write them once per change
        if cached is None or cached[0] is not counters:
            cached = self._counters_cache = (counters, *self._render_counters(counters))
        _, counters_text, failures_text = cached
        append(counters_text)

        driver = result.driver
        if driver is not None:
            append(_DRIVER_HEADER)
            versions = label_block(
                [
                    ("driver_version", driver.driver_version),
                    ("nvml_version", driver.nvml_version),
                    ("cuda_driver_version", driver.cuda_driver_version),
                ]
            )
            append(series_prefix(catalog.GPU_DRIVER_INFO.name, f"{self._node_label},{versions}") + "1\n")

        append(_UP_HEADER)
        append(self._up + ("1\n" if result.nvml_up else "0\n"))
        append(_DURATION_HEADER)
        append(f"{self._duration}{format_value(result.duration_seconds)}\n")
        append(failures_text)
        append(_DEVICES_HEADER)
        append(f"{self._devices}{result.whole_gpus_answering}\n")
        append(_ENUMERATED_HEADER)
        append(f"{self._enumerated}{result.enumerated}\n")
        return "".join(out).encode()
