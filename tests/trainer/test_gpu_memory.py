"""The device memory a rank holds on each GPU, from its own allocator: the source is injectable, read
at scrape time, never initialises CUDA, and a failing source costs the page nothing."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from foxhunt_trainer import TrainingMetrics, render_text
from foxhunt_trainer.contract import catalog
from foxhunt_trainer.gpu_memory import torch_reserved_memory

NAME = catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES.name
GPU = "GPU-7a8b9c0d-aaaa-bbbb-cccc-000000000001"
MIG = "MIG-7a8b9c0d-aaaa-bbbb-cccc-000000000002"


def reserved(metrics: TrainingMetrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["job_id"], s.labels["uuid"]): s.value
        for family in text_string_to_metric_families(render_text(metrics.registry).decode())
        for s in family.samples
        if s.name == NAME
    }


def test_an_injected_source_is_read_at_every_scrape_with_the_rank_and_uuid() -> None:
    metrics = TrainingMetrics()
    job = metrics.start_job("dqn", "job-a", gpu_uuids=[GPU])
    figure = [3 * 2**30]
    job.track_gpu_memory(lambda: {GPU: figure[0]})
    assert reserved(metrics) == {("job-a", GPU): 3 * 2**30}
    figure[0] = 5 * 2**30
    assert reserved(metrics) == {("job-a", GPU): 5 * 2**30}
    labels = next(
        s.labels
        for f in text_string_to_metric_families(render_text(metrics.registry).decode())
        for s in f.samples
        if s.name == NAME
    )
    assert set(labels) == set(catalog.TRAINING_GPU_MEMORY_RESERVED_BYTES.labels)
    job.finish()
    assert reserved(metrics) == {}


def test_a_failing_source_reports_nothing_and_the_page_still_renders(caplog: pytest.LogCaptureFixture) -> None:
    metrics = TrainingMetrics()
    job = metrics.start_job("dqn", "job-b", gpu_uuids=[GPU])

    def broken() -> dict[str, float]:
        raise RuntimeError("allocator gone")

    job.track_gpu_memory(broken)
    assert reserved(metrics) == {}
    assert reserved(metrics) == {}
    assert sum("GPU memory failed" in r.getMessage() for r in caplog.records) == 1


def test_the_default_reads_nothing_without_torch_or_before_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torch_reserved_memory([GPU])() == {}
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "job-c", gpu_uuids=[GPU])
    assert reserved(metrics) == {}
    calls: list[str] = []

    class Cuda:
        initialized = False

        def is_available(self) -> bool:
            return True

        def is_initialized(self) -> bool:
            calls.append("is_initialized")
            return self.initialized

        def device_count(self) -> int:
            return 2

        def memory_reserved(self, index: int) -> int:
            return (0, 7 * 2**20)[index]  # device 0 unused by this process

        def get_device_properties(self, index: int) -> Any:
            return types.SimpleNamespace(uuid=MIG.removeprefix("MIG-"))

    cuda = Cuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert reserved(metrics) == {} and calls  # CUDA not initialised by the program: not touched
    cuda.initialized = True
    assert torch_reserved_memory([MIG])() == {MIG: 7 * 2**20}  # a MIG device keeps its MIG- UUID
    assert torch_reserved_memory([])() == {"GPU-" + MIG.removeprefix("MIG-"): 7 * 2**20}


def test_a_cpu_only_job_exports_no_gpu_memory() -> None:
    metrics = TrainingMetrics()
    metrics.start_job("dqn", "job-d", gpu_uuids=[])
    assert reserved(metrics) == {}
