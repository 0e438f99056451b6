"""In-process tests of the shared pass and the text writer, checked against a prometheus-client
collector built independently (harness/reference_collector.py); no NVML."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.exposition import format_value
from harness.reference_collector import GpuCollector, build_families
from poller.error_counters import ErrorCounters
from poller.exported_metrics import ERROR_TYPES, FAILURE_REASONS, GPU_GAUGES
from poller.metrics_page import TextPageWriter
from poller.samples import DriverInfo, GpuIdentity, GpuSample, MigInfo, PassResult, unidentified_gpu
from poller.shared_pass import SharedPass

GPU0 = GpuIdentity(0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB")
GPU1 = GpuIdentity(1, 'GPU-bb"b\\', 'Odd "name"\nwith newline')
# A MIG device of GPU 0 (slot 2, profile 3g.40gb): its own UUID, its parent's index and product name.
MIG0 = GpuIdentity(0, "MIG-cccc", "NVIDIA A100-SXM4-80GB", MigInfo(2, "GPU-aaaa", "3g.40gb", 2, 3 / 7))


class StubSource:
    """Counts passes; each pass can take `delay` seconds; optionally raises."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay = delay
        self.fail = fail
        self.calls = 0
        self.running = 0
        self.max_running = 0
        self._lock = threading.Lock()

    def collect(self) -> PassResult:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            started = time.monotonic()
            if self.fail:
                raise RuntimeError("bug in a pass")
            time.sleep(self.delay)
            return PassResult(
                nvml_up=True,
                started_at=started,
                finished_at=time.monotonic(),
                samples=(full_sample(GPU0, temperature=self.calls),),
            )
        finally:
            with self._lock:
                self.running -= 1


def full_sample(gpu: GpuIdentity, temperature: int = 65) -> GpuSample:
    return GpuSample(
        gpu,
        utilization_percent=97,
        memory_utilization_percent=41,
        memory_used_bytes=123 * 2**20,
        memory_total_bytes=80 * 2**30,
        temperature_celsius=temperature,
        power_watts=312.5,
        power_limit_watts=400.0,
        sm_clock_hertz=1_410_000_000,
        memory_clock_hertz=1_593_000_000,
        clock_event_reasons=0x44,
        ecc_corrected_total=7,
        ecc_uncorrected_total=0,
        sm_active_percent=83.25,
        sm_occupancy_percent=41.5,
        tensor_active_percent=62.0,
        dram_bandwidth_utilization_percent=55.125,
        pcie_rx_bytes_total=4_000_000_000,
        pcie_tx_bytes_total=1_000_000,
        nvlink_rx_bytes_total=90_000_000_000,
        nvlink_tx_bytes_total=80_000_000_000,
        energy_joules_total=123_456.789,
    )


def parsed(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_min_interval_serves_the_last_pass_to_early_scrapes() -> None:
    now = [100.0]
    source = StubSource()
    shared = SharedPass(source, ErrorCounters(), min_interval=5.0, clock=lambda: now[0])
    first = shared.latest()
    now[0] += 4.9
    assert shared.latest() is first
    assert source.calls == 1
    now[0] += 0.2
    assert shared.latest() is not first
    assert source.calls == 2


def test_zero_min_interval_runs_a_pass_per_sequential_scrape() -> None:
    source = StubSource()
    shared = SharedPass(source, ErrorCounters(), min_interval=0.0)
    for _ in range(3):
        shared.latest()
    assert source.calls == 3


def test_concurrent_scrapes_share_one_pass_and_never_run_two_at_once() -> None:
    source = StubSource(delay=0.3)
    shared = SharedPass(source, ErrorCounters(), min_interval=0.0)
    results: list[PassResult] = []
    start = threading.Barrier(10)

    def scrape() -> None:
        start.wait()
        results.append(shared.latest())

    threads = [threading.Thread(target=scrape) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(results) == 10
    assert source.max_running == 1
    # The first scrape runs a pass; all that arrived while it ran share it.
    assert source.calls == 1, source.calls
    assert len({id(r) for r in results}) == 1


def test_a_failing_pass_reports_nvml_down_and_counts_a_failure() -> None:
    counters = ErrorCounters()
    shared = SharedPass(StubSource(fail=True), counters, min_interval=0.0)
    result = shared.latest()
    assert not result.nvml_up
    assert dict(counters.snapshot().failures)["query"] == 1


def test_negative_min_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="min_interval"):
        SharedPass(StubSource(), ErrorCounters(), min_interval=-1)


def make_page_inputs() -> tuple[PassResult, ErrorCounters]:
    counters = ErrorCounters()
    counters.register_gpu(GPU0)
    counters.register_gpu(GPU1)
    counters.record_xid(GPU0, 79)
    counters.record_xid(GPU0, 79)
    counters.record_xid(GPU1, 4242)
    counters.record_error(GPU1, "gpu_lost")
    counters.record_failure("gpu_lost")
    counters.record_error(unidentified_gpu(2), "gpu_lost")  # lost before it was ever identified
    partial = GpuSample(GPU1, utilization_percent=3, temperature_celsius=30)  # unsupported fields stay None
    result = PassResult(
        nvml_up=True,
        started_at=10.0,
        finished_at=10.0021,
        samples=(full_sample(GPU0), partial, GpuSample(MIG0, memory_used_bytes=7, memory_total_bytes=42_949_672_960)),
        driver=DriverInfo("550.54.15", "12.550.54.15", "12.4"),
        enumerated=3,
    )
    return result, counters


def test_a_mig_device_is_a_gpu_of_its_own_with_its_parent_and_profile() -> None:
    result, counters = make_page_inputs()
    page = parsed(TextPageWriter("node-1").render(result, counters.snapshot()).decode())
    mig = (("gpu_id", "0/2"), ("gpu_name", "NVIDIA A100-SXM4-80GB"), ("node", "node-1"), ("uuid", "MIG-cccc"))
    assert page[(catalog.GPU_MEMORY_USED_BYTES.name, mig)] == 7
    assert page[(catalog.GPU_MIG_SM_SHARE_RATIO.name, mig)] == pytest.approx(3 / 7)
    info = tuple(sorted((*mig, ("parent_gpu_id", "0"), ("parent_uuid", "GPU-aaaa"), ("profile", "3g.40gb"))))
    assert page[(catalog.GPU_MIG_DEVICE_INFO.name, info)] == 1
    # the whole GPUs keep no MIG series, and a MIG device is not a GPU answering for GPUsNotAnswering
    assert [key for key in page if key[0] == catalog.GPU_MIG_DEVICE_INFO.name] == [
        (catalog.GPU_MIG_DEVICE_INFO.name, info)
    ]
    assert page[(catalog.GPU_POLLER_DEVICES.name, (("node", "node-1"),))] == 2
    assert (catalog.GPU_UTILIZATION_PERCENT.name, mig) not in page


def test_text_writer_and_prometheus_client_collector_agree() -> None:
    result, counters = make_page_inputs()
    fast = TextPageWriter("node-1").render(result, counters.snapshot()).decode()

    registry = CollectorRegistry()
    registry.register(GpuCollector(SharedPass(_Fixed(result), counters, 60.0), counters, "node-1"))
    reference = generate_latest(registry).decode()

    assert parsed(fast) == parsed(reference)
    fast_types = {f.name: f.type for f in text_string_to_metric_families(fast)}
    reference_types = {f.name: f.type for f in text_string_to_metric_families(reference)}
    assert fast_types == reference_types


class _Fixed:
    def __init__(self, result: PassResult) -> None:
        self.result = result

    def collect(self) -> PassResult:
        return self.result


def test_page_content_labels_units_and_children() -> None:
    result, counters = make_page_inputs()
    page = parsed(TextPageWriter("node-1").render(result, counters.snapshot()).decode())
    gpu0 = (("gpu_id", "0"), ("gpu_name", GPU0.name), ("node", "node-1"), ("uuid", GPU0.uuid))
    gpu1 = (("gpu_id", "1"), ("gpu_name", GPU1.name), ("node", "node-1"), ("uuid", GPU1.uuid))

    assert page[(catalog.GPU_TEMPERATURE_CELSIUS.name, gpu0)] == 65
    assert page[(catalog.GPU_POWER_WATTS.name, gpu0)] == 312.5
    assert page[(catalog.GPU_SM_CLOCK_HERTZ.name, gpu0)] == 1.41e9
    # Label values with quotes, backslashes and newlines survive escaping.
    assert page[(catalog.GPU_TEMPERATURE_CELSIUS.name, gpu1)] == 30
    # Fields NVML did not give are absent, not zero.
    assert (catalog.GPU_POWER_WATTS.name, gpu1) not in page
    assert not any(name == catalog.GPU_CLOCK_THROTTLE_ACTIVE.name and labels[:4] == gpu1 for name, labels in page)

    def throttle(reason: str) -> float:
        return page[(catalog.GPU_CLOCK_THROTTLE_ACTIVE.name, tuple(sorted((*gpu0, ("reason", reason)))))]

    assert throttle("sw_power_cap") == 1 and throttle("hw_thermal_slowdown") == 1
    # GPM figures: percent gauges as floats, interconnect traffic as byte counters by direction.
    assert page[(catalog.GPU_SM_ACTIVE_PERCENT.name, gpu0)] == 83.25
    assert page[(catalog.GPU_DRAM_BANDWIDTH_UTILIZATION_PERCENT.name, gpu0)] == 55.125
    nvlink_rx = (catalog.GPU_NVLINK_BYTES_TOTAL.name, tuple(sorted((*gpu0, ("direction", "rx")))))
    pcie_tx = (catalog.GPU_PCIE_BYTES_TOTAL.name, tuple(sorted((*gpu0, ("direction", "tx")))))
    assert page[nvlink_rx] == 90_000_000_000 and page[pcie_tx] == 1_000_000
    assert (catalog.GPU_SM_ACTIVE_PERCENT.name, gpu1) not in page  # no GPM on that GPU: absent
    assert not any(name == catalog.GPU_PCIE_BYTES_TOTAL.name and labels[:4] == gpu1 for name, labels in page)
    assert throttle("gpu_idle") == 0 and throttle("hw_slowdown") == 0

    def xid(gpu: tuple[tuple[str, str], ...], code: int) -> float:
        return page[(catalog.GPU_XID_ERRORS_TOTAL.name, tuple(sorted((*gpu, ("xid", str(code))))))]

    assert xid(gpu0, 79) == 2  # a repeated XID is counted
    assert xid(gpu1, 4242) == 1  # any code, created by its first occurrence
    # No per-code child before its first occurrence (XID codes are an open set): only the two seen.
    xid_series = sorted(labels for name, labels in page if name == catalog.GPU_XID_ERRORS_TOTAL.name)
    assert xid_series == sorted([tuple(sorted((*gpu0, ("xid", "79")))), tuple(sorted((*gpu1, ("xid", "4242"))))])

    def errors(gpu: tuple[tuple[str, str], ...], error_type: str) -> float:
        return page[(catalog.GPU_ERRORS_TOTAL.name, tuple(sorted((*gpu, ("error_type", error_type)))))]

    assert errors(gpu0, "xid") == 2 and errors(gpu1, "xid") == 1
    assert errors(gpu1, "gpu_lost") == 1 and errors(gpu0, "gpu_lost") == 0
    assert errors(gpu0, "ecc_uncorrected") == 0
    # A GPU lost before the poller read its UUID is counted under its index alone.
    unidentified = (("gpu_id", "2"), ("gpu_name", ""), ("node", "node-1"), ("uuid", ""))
    assert errors(unidentified, "gpu_lost") == 1
    assert errors(unidentified, "xid") == 0

    node = (("node", "node-1"),)
    for reason in FAILURE_REASONS:
        assert (catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name, tuple(sorted((*node, ("reason", reason))))) in page
    assert page[(catalog.GPU_POLLER_NVML_UP.name, node)] == 1
    assert page[(catalog.GPU_POLLER_DEVICES.name, node)] == 2  # answering
    assert page[(catalog.GPU_POLLER_DEVICES_ENUMERATED.name, node)] == 3  # one enumerated GPU does not answer
    assert page[(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name, node)] == pytest.approx(0.0021)
    info = (
        ("cuda_driver_version", "12.4"),
        ("driver_version", "550.54.15"),
        ("node", "node-1"),
        ("nvml_version", "12.550.54.15"),
    )
    assert page[(catalog.GPU_DRIVER_INFO.name, info)] == 1


def test_nvml_down_page_has_health_and_no_gpu_series() -> None:
    counters = ErrorCounters()
    counters.record_failure("init")
    result = PassResult(nvml_up=False, started_at=1.0, finished_at=1.001)
    text = TextPageWriter("cpu-node").render(result, counters.snapshot()).decode()
    page = parsed(text)
    node = (("node", "cpu-node"),)
    assert page[(catalog.GPU_POLLER_NVML_UP.name, node)] == 0
    assert page[(catalog.GPU_POLLER_DEVICES.name, node)] == 0
    assert page[(catalog.GPU_POLLER_DEVICES_ENUMERATED.name, node)] == 0
    assert page[(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name, (*node, ("reason", "init")))] == 1
    assert all(name.startswith("ml_gpu_poller_") for name, _ in page)


def test_every_exported_name_and_label_set_comes_from_the_catalog() -> None:
    result, counters = make_page_inputs()
    families = build_families("n", result, counters.snapshot())
    poller_metrics = {m.name: m for m in catalog.by_producer(catalog.Producer.GPU_POLLER)}
    exported = set()
    for family in text_string_to_metric_families(generate_registry_text(families)):
        sample_names = {s.name for s in family.samples}
        for name in sample_names:
            metric = catalog.by_name(name)
            assert metric.producer is catalog.Producer.GPU_POLLER
            exported.add(metric.name)
            for sample in family.samples:
                assert set(sample.labels) == set(metric.labels), (name, sample.labels)
    assert exported == set(poller_metrics), set(poller_metrics) ^ exported


def generate_registry_text(families: list[Metric]) -> str:
    class Static(Collector):
        def collect(self) -> list[Metric]:
            return families

    registry = CollectorRegistry()
    registry.register(Static())
    return generate_latest(registry).decode()


def test_label_order_matches_the_catalog() -> None:
    assert catalog.GPU == ("node", "gpu_id", "uuid", "gpu_name")
    assert all(metric.labels[:4] == catalog.GPU for metric, _ in GPU_GAUGES)


def test_error_counters_refuse_unknown_types() -> None:
    counters = ErrorCounters()
    with pytest.raises(ValueError):
        counters.record_error(GPU0, "typo")
    with pytest.raises(ValueError):
        counters.record_failure("typo")
    counters.record_error(GPU0, ERROR_TYPES[0], 3)
    assert dict(counters.snapshot().gpus[0].errors)[ERROR_TYPES[0]] == 3


def test_xid_codes_appear_on_first_occurrence_and_every_xid_counts_as_an_error() -> None:
    counters = ErrorCounters()
    counters.register_gpu(GPU0)
    (gpu,) = counters.snapshot().gpus
    assert gpu.xids == ()  # no per-code child up front
    assert dict(gpu.errors) == dict.fromkeys(ERROR_TYPES, 0)  # the error counters are, for increase()
    counters.record_xid(GPU0, 48)
    counters.record_xid(GPU0, 48)
    counters.record_xid(GPU0, 31337)
    (gpu,) = counters.snapshot().gpus
    assert gpu.xids == ((48, 2), (31337, 1))
    assert dict(gpu.errors)["xid"] == 3
    counters.record_xid(GPU1, 79)  # an XID on a GPU not registered yet registers it
    assert dict(counters.snapshot().gpus[1].errors) == {"xid": 1, "ecc_uncorrected": 0, "gpu_lost": 0}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3, "3"),
        (312.5, "312.5"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (-float("inf"), "-Inf"),
        (1e-7, "1e-07"),
    ],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_writer_reuses_the_page_until_the_pass_or_the_counters_change() -> None:
    result, counters = make_page_inputs()
    writer = TextPageWriter("node-1")
    first = writer.render(result, counters.snapshot())
    assert writer.render(result, counters.snapshot()) is first
    counters.record_xid(GPU0, 79)  # an XID between two passes shows on the next scrape
    second = writer.render(result, counters.snapshot())
    assert second is not first
    assert b'xid="79"} 3\n' in second and b'xid="79"} 2\n' in first
    newer = PassResult(nvml_up=True, started_at=20.0, finished_at=20.001, samples=(full_sample(GPU0, 88),))
    assert b"} 88\n" in writer.render(newer, counters.snapshot())
