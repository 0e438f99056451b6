"""The poller's `/metrics` page in the Prometheus text format (0.0.4), written fast.

A prometheus-client collector with `generate_latest` produces the same page (the tests parse
both and compare), but builds a dict and a namedtuple per sample and format every
label on every scrape: several microseconds a sample. Here every GPU's label block is escaped
once, when the GPU is first seen (with `observability.exposition`'s pieces, the one place that
knows the format). The GPU families are then compiled into `%` templates, once per layout (which
GPUs, which of their values are present), and each scrape fills them with the values in one
operation per part; this keeps a full 8-GPU page well under the cost of spawning one process.
The page carries no exemplars, so the poller offers only the text format whatever the scraper
asks for.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import chain
from typing import Any

from observability import catalog
from observability.exposition import format_value, label_block, series_prefix, text_header
from poller.collector import gpu_label_values
from poller.error_counters import CountersSnapshot
from poller.exported_metrics import ECC_TYPES, GPU_COUNTERS, GPU_GAUGES, INTERCONNECT_COUNTERS, THROTTLE_REASONS
from poller.model import GpuIdentity, PassResult


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
        self.ecc = tuple(  # ECC_TYPES order
            series_prefix(catalog.GPU_ECC_ERRORS_TOTAL.name, f"{base},{label_block([('ecc_type', ecc_type)])}")
            for ecc_type, _ in ECC_TYPES
        )
        self.interconnect = tuple(  # INTERCONNECT_COUNTERS order, each metric's directions in turn
            series_prefix(metric.name, f"{base},{label_block([('direction', direction)])}")
            for metric, directions in INTERCONNECT_COUNTERS
            for direction, _ in directions
        )
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
        prefix = self.errors.get(error_type)
        if prefix is None:
            labels = f"{self._base},{label_block([('error_type', error_type)])}"
            prefix = self.errors[error_type] = series_prefix(catalog.GPU_ERRORS_TOTAL.name, labels)
        return prefix

    def xid_prefix(self, code: int) -> str:
        prefix = self.xids.get(code)
        if prefix is None:
            labels = f"{self._base},{label_block([('xid', str(code))])}"
            prefix = self.xids[code] = series_prefix(catalog.GPU_XID_ERRORS_TOTAL.name, labels)
        return prefix


_GAUGE_HEADERS = tuple(_header(metric) for metric, _ in GPU_GAUGES)
_COUNTER_HEADERS = tuple(_header(metric) for metric, _ in GPU_COUNTERS)
_THROTTLE_HEADER = _header(catalog.GPU_CLOCK_THROTTLE_ACTIVE)
_ECC_HEADER = _header(catalog.GPU_ECC_ERRORS_TOTAL)
_INTERCONNECT_FAMILIES: tuple[tuple[str, range], ...] = tuple(  # (header, positions in _GpuLines.interconnect)
    (
        _header(metric),
        range(
            sum(len(d) for _, d in INTERCONNECT_COUNTERS[:index]),
            sum(len(d) for _, d in INTERCONNECT_COUNTERS[: index + 1]),
        ),
    )
    for index, (metric, _) in enumerate(INTERCONNECT_COUNTERS)
)
# Every value one GPU gives the GPU families except the throttle mask, read with one C call per
# GPU: gauges, ECC counts, interconnect counters, other counters (the positions below).
_VALUE_ATTRIBUTES = (
    *(attribute for _, attribute in GPU_GAUGES),
    *(attribute for _, attribute in ECC_TYPES),
    *(attribute for _, directions in INTERCONNECT_COUNTERS for _, attribute in directions),
    *(attribute for _, attribute in GPU_COUNTERS),
)
_GPU_VALUES = operator.attrgetter(*_VALUE_ATTRIBUTES)
_ECC_AT = len(GPU_GAUGES)
_INTERCONNECT_AT = _ECC_AT + len(ECC_TYPES)
_COUNTERS_AT = _INTERCONNECT_AT + sum(len(directions) for _, directions in INTERCONNECT_COUNTERS)


def _picker(positions: list[int]) -> Callable[[tuple[object, ...]], tuple[object, ...]]:
    """A C function that takes the items at `positions` of a tuple, as a tuple."""
    if len(positions) == 1:
        one = operator.itemgetter(positions[0])
        return lambda values: (one(values),)
    if not positions:
        return lambda values: ()
    return operator.itemgetter(*positions)


class _Template:
    """Family headers and line prefixes as literal text, a `%s` for each value: a part of the page
    filled with one `%` operation."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._positions: list[int] = []
        self._float_positions: list[int] = []
        self.text = ""
        self._pick = self._pick_floats = _picker([])

    def literal(self, text: str) -> None:
        self._text.append(text.replace("%", "%%"))

    def line(self, prefix: str, position: int, kind: type) -> None:
        """A sample line whose value is at `position` of the values; nothing where that is None."""
        if kind is type(None):
            return
        self.literal(prefix)
        self._text.append("%s\n")
        self._positions.append(position)
        if kind is float:
            self._float_positions.append(position)

    def done(self) -> _Template:
        self.text = "".join(self._text)
        self._pick, self._pick_floats = _picker(self._positions), _picker(self._float_positions)
        return self

    def fill(self, values: tuple[object, ...]) -> str:
        present = self._pick(values)
        floats: Any = self._pick_floats(values)
        total = sum(floats)
        if total - total != 0.0:  # a NaN or an infinity among them (rare): written as Prometheus spells them
            present = tuple(map(format_value, present))  # type: ignore[arg-type]
        return self.text % present  # `%s` of an int is str(), of a finite float repr()


class _GpuFamilies:
    """The GPU families of a page (gauges, throttle reasons, ECC, interconnect and other counters)
    for one list of GPUs and one pattern of missing values: compiled once, then each scrape writes
    them with two `%` operations (around the throttle family, which is text cached per reason mask)
    instead of a string per line. `values` are the GPUs' `_GPU_VALUES` laid end to end; `kinds` their
    types (NoneType: the value is missing and its line left out).
    """

    def __init__(self, gpus: tuple[GpuIdentity, ...], lines: tuple[_GpuLines, ...], kinds: tuple[type, ...]) -> None:
        self.gpus = gpus
        self.lines = lines
        width = len(_VALUE_ATTRIBUTES)

        def line(template: _Template, prefix: str, gpu: int, attribute: int) -> None:
            position = gpu * width + attribute
            template.line(prefix, position, kinds[position])

        gauges = _Template()
        for attribute, header in enumerate(_GAUGE_HEADERS):
            gauges.literal(header)
            for gpu, gpu_lines in enumerate(lines):
                line(gauges, gpu_lines.gauges[attribute], gpu, attribute)
        self.gauges = gauges.done()

        counters = _Template()
        counters.literal(_ECC_HEADER)
        for gpu, gpu_lines in enumerate(lines):
            for index, prefix in enumerate(gpu_lines.ecc):
                line(counters, prefix, gpu, _ECC_AT + index)
        for header, positions in _INTERCONNECT_FAMILIES:
            counters.literal(header)
            for gpu, gpu_lines in enumerate(lines):
                for index in positions:
                    line(counters, gpu_lines.interconnect[index], gpu, _INTERCONNECT_AT + index)
        for index, header in enumerate(_COUNTER_HEADERS):
            counters.literal(header)
            for gpu, gpu_lines in enumerate(lines):
                line(counters, gpu_lines.counters[index], gpu, _COUNTERS_AT + index)
        self.counters = counters.done()


# Layouts kept at once (a field that fails now and then alternates between two).
_MAX_LAYOUTS = 16
_XID_HEADER = _header(catalog.GPU_XID_ERRORS_TOTAL)
_ERRORS_HEADER = _header(catalog.GPU_ERRORS_TOTAL)
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
        self._families: dict[tuple[type, ...], _GpuFamilies] = {}  # by the kinds of the GPUs' values

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
        prefix = self._failures.get(reason)
        if prefix is None:
            labels = f"{self._node_label},{label_block([('reason', reason)])}"
            prefix = self._failures[reason] = series_prefix(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name, labels)
        return prefix

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

        samples = result.samples
        gpus = tuple(sample.gpu for sample in samples)
        values = tuple(chain.from_iterable(map(_GPU_VALUES, samples)))
        kinds = tuple(map(type, values))
        families = self._families.get(kinds)
        if families is None or families.gpus != gpus:  # new GPUs, or a value came or went
            families = _GpuFamilies(gpus, tuple(map(self._lines, gpus)), kinds)
            layouts = self._families if len(self._families) < _MAX_LAYOUTS else {}
            self._families = {**layouts, kinds: families}
        append(families.gauges.fill(values))
        append(_THROTTLE_HEADER)
        for sample, lines in zip(samples, families.lines, strict=True):
            reasons = sample.clock_event_reasons
            if reasons is not None:
                append(lines.throttle_text(reasons))
        append(families.counters.fill(values))

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
        append(f"{self._devices}{len(result.samples)}\n")
        append(_ENUMERATED_HEADER)
        append(f"{self._enumerated}{result.enumerated}\n")
        return "".join(out).encode()
