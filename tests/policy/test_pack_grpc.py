"""The CrossGuard pack tested the way the Pulumi engine uses it, without the CLI: start the pack
(`python policy/__main__.py`, and `python -u -m pulumi.policy <engine> policy` as the engine does),
read the port it prints, and call the analyzer over gRPC with every resource: GetAnalyzerInfo,
Configure (the stack's policy config), Analyze per resource and AnalyzeStack with all of them.
The analyzer hands policies read-only proxies (not dicts) with numbers as floats."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from google.protobuf import empty_pb2, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from infra import REPO_ROOT
from infra.offline.policy_context import PACK_CONFIG_PATH
from infra.stacks import STACKS
from policy.engine import evaluate
from policy.pack import PACK_NAME
from policy.pack_config import context_to_config
from policy.rules import ALL_POLICIES, policy_by_id
from policy.vocabulary import Enforcement, KubeObject
from tests.policy.fixtures import CASES, CONTEXT, compliant_stack, objects, type_token

LEVELS = {Enforcement.MANDATORY: analyzer_pb2.MANDATORY, Enforcement.ADVISORY: analyzer_pb2.ADVISORY}
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's sentinel for a value unknown in preview


@dataclass
class Pack:
    process: subprocess.Popen[bytes]
    port: int
    stub: analyzer_pb2_grpc.AnalyzerStub
    channel: grpc.Channel


# What the engine puts in an analyzer's environment during `pulumi preview --stack dev`.
ENGINE_ENV = {"PULUMI_PROJECT": "foxhunt-observability", "PULUMI_STACK": "dev", "PULUMI_DRY_RUN": "true"}


def start_pack(command: Sequence[str], log: Path) -> Pack:
    env = {**os.environ, **ENGINE_ENV}
    with log.open("wb") as stderr:
        process = subprocess.Popen(list(command), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr, env=env)
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(process.stdout.fileno(), 64)
            if not chunk:
                break
            line += chunk
    if not line.strip().isdigit():
        stop(process)
        pytest.fail(f"the pack printed no port (got {line!r}); stderr:\n{log.read_text()[-4000:]}")
    port = int(line)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return Pack(process, port, analyzer_pb2_grpc.AnalyzerStub(channel), channel)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Iterator[Pack]:
    log = tmp_path_factory.mktemp("pack") / "stderr.log"
    started = start_pack([sys.executable, "policy/__main__.py"], log)
    try:
        yield started
    finally:
        started.channel.close()
        stop(started.process)


def struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(json.loads(json.dumps(value)))
    return message


def configure(pack: Pack, config: Mapping[str, Mapping[str, Any]]) -> None:
    """What the engine sends from --policy-pack-config: each policy's properties and level."""
    policy_config = {
        name: analyzer_pb2.PolicyConfig(
            enforcementLevel=LEVELS[policy_by_id(name).enforcement], properties=struct(properties)
        )
        for name, properties in config.items()
    }
    pack.stub.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config), timeout=30)


@dataclass(frozen=True)
class Resource:
    type: str
    name: str
    properties: Mapping[str, Any]

    @property
    def urn(self) -> str:
        return f"urn:pulumi:dev::foxhunt-observability::{self.type}::{self.name}"


def analyze_all(pack: Pack, resources: Sequence[Resource]) -> list[analyzer_pb2.AnalyzeDiagnostic]:
    diagnostics = []
    for r in resources:
        request = analyzer_pb2.AnalyzeRequest(type=r.type, name=r.name, urn=r.urn, properties=struct(r.properties))
        diagnostics += list(pack.stub.Analyze(request, timeout=60).diagnostics)
    stack_request = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(type=r.type, name=r.name, urn=r.urn, properties=struct(r.properties))
            for r in resources
        ]
    )
    diagnostics += list(pack.stub.AnalyzeStack(stack_request, timeout=60).diagnostics)
    return diagnostics


def fixture_resources(stack: dict[str, dict[str, Any]]) -> list[Resource]:
    return [Resource(type_token(key, m), key, m) for key, m in stack.items()]


def shown(diagnostics: Sequence[analyzer_pb2.AnalyzeDiagnostic]) -> str:
    return "\n".join(f"{d.policyName} [{d.enforcementLevel}] {d.message}" for d in diagnostics)


def test_analyzer_info_lists_every_policy_with_level_type_and_config_schema(pack):
    info = pack.stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
    assert info.name == PACK_NAME and info.supportsConfig
    by_name = {p.name: p for p in info.policies}
    assert list(by_name) == [p.id for p in ALL_POLICIES]
    for policy in ALL_POLICIES:
        entry = by_name[policy.id]
        assert entry.description == policy.description
        assert entry.enforcementLevel == LEVELS[policy.enforcement]
        expected_type = analyzer_pb2.POLICY_TYPE_STACK if policy.is_stack_policy else analyzer_pb2.POLICY_TYPE_RESOURCE
        assert entry.policy_type == expected_type
        assert entry.remediation_steps == policy.remediation
        schema_keys = set(entry.configSchema.properties.keys())
        assert len(schema_keys) == len(policy.needs) + len(policy.uses)
        assert len(entry.configSchema.required) == len(policy.needs)


def test_compliant_fixture_yields_no_diagnostic(pack):
    configure(pack, context_to_config(CONTEXT))
    diagnostics = analyze_all(pack, fixture_resources(compliant_stack()))
    assert diagnostics == [], shown(diagnostics)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_violating_fixture_yields_the_same_diagnostics_as_pytest(pack, case):
    configure(pack, context_to_config(CONTEXT))
    stack = compliant_stack()
    case.mutate(stack)
    diagnostics = analyze_all(pack, fixture_resources(stack))
    assert {d.policyName for d in diagnostics} == {case.policy} | case.also, shown(diagnostics)
    policy = policy_by_id(case.policy)
    ours = [d for d in diagnostics if d.policyName == case.policy]
    assert all(d.enforcementLevel == LEVELS[policy.enforcement] for d in ours)
    assert all(d.policyPackName == PACK_NAME and d.description == policy.description for d in ours)
    assert any(case.path in d.message and case.problem in d.message and "Fix: " in d.message for d in ours), shown(ours)
    # Exactly what the pure functions report on plain dicts: one set of rules, two enforcers.
    expected = sorted(
        f"{v.policy}: {policy_by_id(v.policy).description}\n{v.message()}" for v in evaluate(objects(stack), CONTEXT)
    )
    actual = sorted(f"{d.policyName}: {d.message}" for d in diagnostics)
    assert actual == expected


def test_stack_diagnostic_names_the_resource_by_urn(pack):
    configure(pack, context_to_config(CONTEXT))
    stack = compliant_stack()
    stack["dashboard-traces"]["data"] = stack["dashboard-training"]["data"]
    diagnostics = analyze_all(pack, fixture_resources(stack))
    assert [(d.policyName, d.urn) for d in diagnostics] == [
        (
            "dashboard-uids-unique",
            "urn:pulumi:dev::foxhunt-observability::kubernetes:core/v1:ConfigMap::dashboard-traces",
        )
    ]


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_stack_has_no_mandatory_diagnostic(pack, rendered_stacks, stack):
    """Every resource the program registers (components and non-Kubernetes ones included), with the
    policy config the render wrote from the stack's own settings, as `pulumi preview --policy-pack
    policy --policy-pack-config rendered/<stack>/policy/pack-config.json` would."""
    configure(pack, json.loads(rendered_stacks[stack].files[PACK_CONFIG_PATH]))
    resources = [Resource(r.type, r.name, r.inputs) for r in rendered_stacks[stack].run.resources]
    assert any(r.type.startswith("kubernetes:") for r in resources)
    diagnostics = analyze_all(pack, resources)
    assert [d for d in diagnostics if d.enforcementLevel == analyzer_pb2.MANDATORY] == [], shown(diagnostics)


def test_without_config_the_context_policies_ask_for_it(pack):
    configure(pack, {})
    stack = compliant_stack()
    diagnostics = analyze_all(pack, fixture_resources(stack))
    needing = {p.id for p in ALL_POLICIES if p.needs}
    assert {d.policyName for d in diagnostics} == needing, shown(diagnostics)
    assert all("--policy-pack-config rendered/<stack>/policy/pack-config.json" in d.message for d in diagnostics)
    assert all(d.enforcementLevel == analyzer_pb2.MANDATORY for d in diagnostics)


def test_non_kubernetes_resources_are_not_checked(pack):
    configure(pack, context_to_config(CONTEXT))
    image = Resource("docker-build:index:Image", "gpu-poller-image", {"tags": ["registry.invalid/poller:latest"]})
    component = Resource("foxhunt:observability:GpuPoller", "gpu-poller", {})
    request = analyzer_pb2.AnalyzeRequest(
        type=image.type, name=image.name, urn=image.urn, properties=struct(image.properties)
    )
    assert list(pack.stub.Analyze(request, timeout=30).diagnostics) == []
    request = analyzer_pb2.AnalyzeRequest(type=component.type, name=component.name, urn=component.urn)
    assert list(pack.stub.Analyze(request, timeout=30).diagnostics) == []


def test_value_unknown_during_preview_is_advisory_not_a_crash(pack):
    """The poller's image ref is an output of the image build: unknown during preview."""
    configure(pack, context_to_config(CONTEXT))
    stack = compliant_stack()
    stack["gpu-poller"]["spec"]["template"]["spec"]["containers"][0]["image"] = UNKNOWN_STRING
    daemonset = fixture_resources({"gpu-poller": stack["gpu-poller"]})[0]
    request = analyzer_pb2.AnalyzeRequest(
        type=daemonset.type, name=daemonset.name, urn=daemonset.urn, properties=struct(daemonset.properties)
    )
    diagnostics = list(pack.stub.Analyze(request, timeout=30).diagnostics)
    assert diagnostics, "the image policies should say they could not run"
    assert all(d.enforcementLevel == analyzer_pb2.ADVISORY for d in diagnostics), shown(diagnostics)
    assert {"image-not-latest", "image-pinned-by-digest"} <= {d.policyName for d in diagnostics}
    assert all("can't be known during preview" in d.message for d in diagnostics)


def test_policies_receive_read_only_proxies(pack):
    """Guard for the premise of the Mapping checks: the analyzer's props are not dicts or lists."""
    from pulumi_policy.proxy import unknown_checking_proxy

    proxied = unknown_checking_proxy({"spec": {"containers": [{"name": "a"}]}})
    assert not isinstance(proxied, dict) and not isinstance(proxied["spec"]["containers"], list)
    obj = KubeObject(proxied)
    assert obj.manifest["spec"]["containers"][0]["name"] == "a"


def test_pack_starts_the_way_the_engine_starts_it(tmp_path):
    """`pulumi preview --policy-pack policy` runs `python -u -m pulumi.policy <engine-address> policy`."""
    started = start_pack([sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "policy"], tmp_path / "log")
    try:
        info = started.stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == PACK_NAME and len(info.policies) == len(ALL_POLICIES)
        configure(started, context_to_config(CONTEXT))
        bad = compliant_stack()["gpu-poller"]
        bad["spec"]["template"]["spec"]["hostNetwork"] = True
        resource = Resource("kubernetes:apps/v1:DaemonSet", "gpu-poller", bad)
        request = analyzer_pb2.AnalyzeRequest(
            type=resource.type, name=resource.name, urn=resource.urn, properties=struct(bad)
        )
        diagnostics = list(started.stub.Analyze(request, timeout=30).diagnostics)
        assert [(d.policyName, d.enforcementLevel) for d in diagnostics] == [
            ("pod-security-restricted", analyzer_pb2.MANDATORY)
        ]
    finally:
        started.channel.close()
        stop(started.process)
