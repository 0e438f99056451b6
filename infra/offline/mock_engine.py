"""Run the Pulumi program in-process under the SDK's mock engine and record every resource.

No Pulumi CLI, no cluster, no credentials: `pulumi.runtime.set_mocks` replaces the engine and
the resource monitor. What the mocks see is what `pulumi up` would send to the providers, so the
recorded inputs are the manifests the cluster would receive.

Known behaviour of the mocks handled here: inputs arrive camelCase with every integer as a float
(converted back), a program must be a function (run once per call, not at import), and
`reset_options()` then `set_mocks()` must precede every run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await


@dataclass(frozen=True)
class RecordedResource:
    """One registered resource: Pulumi type token, logical name, parent URN and its inputs."""

    type: str
    name: str
    urn: str
    parent_urn: str
    custom: bool
    inputs: Mapping[str, Any]
    provider: str = ""  # the provider reference ("<urn>::<id>"); empty for the default provider
    aliases: tuple[str, ...] = ()  # URNs the resource was known by before (ResourceOptions.aliases)


@dataclass
class MockRun:
    resources: list[RecordedResource] = field(default_factory=list)
    # The stack outputs (`pulumi.export`), as `pulumi stack output --json` would show them.
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, type_token: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_token]


def normalize(value: Any) -> Any:
    """Undo the mock engine's number encoding: integral floats back to ints, recursively."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


def fake_digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()


class RecordingMocks(pulumi.runtime.Mocks):
    """Return inputs as state; give images a deterministic digest so refs stay stable."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "docker-build:index:Image":
            tags = state.get("tags") or []
            digest = fake_digest(json.dumps(normalize(args.inputs), sort_keys=True))
            repo = str(tags[0]).rsplit(":", 1)[0] if tags else "registry.invalid/image"
            state.update(digest=digest, ref=f"{repo}@{digest}")
        return f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The SDK's mock monitor, also keeping the type, parent and inputs of every registration."""

    def __init__(self, mocks: pulumi.runtime.Mocks, run: MockRun) -> None:
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            inputs = rpc.deserialize_properties(request.object)
            self.run.resources.append(
                RecordedResource(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent_urn=request.parent,
                    custom=bool(request.custom),
                    inputs=normalize(_unwrap(inputs)),
                    provider=str(request.provider),
                    aliases=(*request.aliasURNs, *(_alias_urn(response.urn, spec) for spec in request.aliases)),
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if "::pulumi:pulumi:Stack::" in request.urn:
            from pulumi.runtime import rpc

            self.run.outputs.update(normalize(_unwrap(rpc.deserialize_properties(request.outputs))))
        return super().RegisterResourceOutputs(request)  # type: ignore[no-untyped-call]


def _alias_urn(urn: str, alias: Any) -> str:
    """The URN an alias names, for a resource now at `urn`: given as a URN, or as a spec of another
    name or type under the same parent (the only kind of spec this program declares)."""
    if alias.urn:
        return str(alias.urn)
    spec = alias.spec
    head, name = urn.rsplit("::", 1)
    stack_project, qualified_type = head.rsplit("::", 1)
    parent_types, _, type_token = qualified_type.rpartition("$")
    type_token = spec.type or type_token
    return f"{stack_project}::{parent_types + '$' if parent_types else ''}{type_token}::{spec.name or name}"


def _unwrap(value: Any) -> Any:
    """Strip Pulumi's secret/unknown wrappers the RPC layer leaves in deserialized inputs."""
    if isinstance(value, Mapping):
        sig = value.get("4dabf18193072939515e22adb298388d")
        if sig == "1b47061264138c4ac30d75fd1eb44270":  # secret sentinel
            return _unwrap(value.get("value"))
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def run_program(
    program: Callable[[], None],
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    secret_keys: list[str],
) -> MockRun:
    """Run `program` as stack `stack` with `config` (keys `project:key`, values strings)."""
    run = MockRun()
    mocks = RecordingMocks()
    pulumi_settings.reset_options(project=project, stack=stack, preview=False)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=RecordingMonitor(mocks, run))
    set_all_config(dict(config), secret_keys)

    def program_then_outputs() -> None:
        # The mocks finish their root Stack before the program runs; send its outputs again at
        # the end, as the engine's own Stack does when a real program returns.
        program()
        root: Any = pulumi.runtime.settings.get_root_resource()
        root.register_outputs(dict(root.outputs))

    _sync_await(run_pulumi_func(program_then_outputs))
    return run
