"""Helpers of the infra tests: finding rendered objects, and a mock-engine run that keeps what the
engine receives before unwrapping (secret markers, resource options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra import program
from infra.offline.mock_engine import MockRun, RecordingMocks, RecordingMonitor
from infra.offline.result import RenderResult
from infra.settings import PROJECT, available_stacks, read_stack_config

STACKS = available_stacks()


def objects(result: RenderResult, kind: str) -> list[dict[str, Any]]:
    """The rendered Kubernetes objects of one kind (patches appear under the patched kind)."""
    return [m for m in result.manifests.values() if m["kind"] == kind]


def one(result: RenderResult, kind: str) -> dict[str, Any]:
    found = objects(result, kind)
    assert len(found) == 1, f"{result.stack}: expected one {kind}, found {len(found)}"
    return found[0]


@dataclass
class RawRegistration:
    """What the engine receives for one resource, before any unwrapping: secrets stay wrapped."""

    type: str
    name: str
    retain_on_delete: bool
    inputs: dict[str, Any]


SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get("4dabf18193072939515e22adb298388d") == SECRET_SIG


class RawMonitor(RecordingMonitor):
    def __init__(self, mocks: RecordingMocks, run: MockRun, raw: list[RawRegistration]) -> None:
        super().__init__(mocks, run)
        self.raw = raw

    def RegisterResource(self, request: Any) -> Any:
        self.raw.append(
            RawRegistration(
                request.type, request.name, bool(request.retainOnDelete), rpc.deserialize_properties(request.object)
            )
        )
        return super().RegisterResource(request)


def run_raw(stack: str, overrides: dict[str, Any] | None = None) -> list[RawRegistration]:
    """Run the program for `stack` under the mocks, keeping each registration as sent."""
    config = read_stack_config(stack, overrides=overrides)
    run, raw = MockRun(), []  # type: ignore[var-annotated]
    mocks = RecordingMocks()
    pulumi_settings.reset_options(project=PROJECT, stack=stack, preview=False)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=RawMonitor(mocks, run, raw))
    set_all_config(config.pulumi_config(), [f"{PROJECT}:{k}" for k in sorted(config.secret_keys)])
    _sync_await(run_pulumi_func(program.main))
    return raw
