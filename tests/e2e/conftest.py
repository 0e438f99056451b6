"""Fixtures of the end-to-end tests: the synthetic trainer as a subprocess (harness.trainer_process),
an OTLP collector stub, and the fake NVML harness (harness.fake_nvml)."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from harness.trainer_process import TrainerProcess

HARNESS_MODULE = "harness.fake_nvml"


def load_harness() -> ModuleType:
    """The poller tests' fake NVML harness (a plain module; the repository root is on the import path)."""
    return importlib.import_module(HARNESS_MODULE)


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, bytes, str]:
    return load_harness().http_get("127.0.0.1", port, path, timeout)  # type: ignore[no-any-return]


@pytest.fixture
def start_trainer(tmp_path: Path) -> Iterator[Callable[..., TrainerProcess]]:
    """start_trainer(*args, env=None) -> a ready TrainerProcess, stopped at teardown."""
    started: list[TrainerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> TrainerProcess:
        trainer = TrainerProcess(tmp_path, *args, env=env)
        started.append(trainer)
        trainer.wait_ready()
        return trainer

    yield start
    for trainer in started:
        trainer.stop()


class CollectorStub(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps what it gets."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.received = threading.Condition()

    def Export(self, request: Any, context: Any) -> Any:
        with self.received:
            self.requests.append(request)
            self.received.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[dict[str, str], str]]:
        """(resource attributes, span name) of every span received."""
        out: list[tuple[dict[str, str], str]] = []
        for request in list(self.requests):
            for resource_spans in request.resource_spans:
                attributes = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    out.extend((attributes, span.name) for span in scope_spans.spans)
        return out

    def wait_for_span(self, name: str, timeout: float = 30.0) -> dict[str, str]:
        """The resource attributes of the first span called `name`, waiting for it to arrive."""
        deadline = time.monotonic() + timeout
        with self.received:
            while True:
                for attributes, span_name in self.spans():
                    if span_name == name:
                        return attributes
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no span {name!r} within {timeout}s; got {[n for _, n in self.spans()]}")
                self.received.wait(left)


@pytest.fixture
def otlp_collector() -> Iterator[tuple[CollectorStub, int]]:
    """(collector stub, port) of an OTLP gRPC receiver on 127.0.0.1."""
    stub = CollectorStub()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(stub, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield stub, port
    server.stop(grace=None).wait(5)
