"""The stack's explicit Kubernetes provider and its guard; the readable Alertmanager file; the
render's summary line against the files it wrote."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra import REPO_ROOT
from infra.kube_provider import PROVIDER_TYPE, ProviderContextError, context_problem, guard_live_run
from infra.offline import render
from infra.offline.artifacts import ALERTMANAGER_PATH, secret_placeholder
from infra.offline.checks import check_provider as check_render
from infra.settings import SettingsError, read_stack_config, validate_stack
from infra.stacks import STACKS


def kubeconfig(*contexts: str, current: str | None = None) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": c, "cluster": {"server": f"https://{c}.invalid:6443"}} for c in contexts],
            "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
            **({"current-context": current} if current else {}),
        }
    )


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_resource_goes_through_the_stack_provider(rendered, stack):
    result = rendered[stack]
    (provider,) = [r for r in result.run.resources if r.type == PROVIDER_TYPE]
    assert provider.inputs["context"] == result.settings.kubernetes.context
    assert str(provider.inputs["enableServerSideApply"]).lower() == "true"
    kube = [r for r in result.run.resources if r.type.startswith("kubernetes:")]
    assert kube and all(r.provider.startswith(f"{provider.urn}::") for r in kube)
    assert check_render(result) == []


def test_the_check_catches_a_resource_on_the_default_provider_or_another_context(rendered):
    result = rendered["dev"]
    resources = list(result.run.resources)
    i = next(i for i, r in enumerate(resources) if r.type == "kubernetes:apps/v1:DaemonSet")
    resources[i] = dataclasses.replace(resources[i], provider="")
    p = next(i for i, r in enumerate(resources) if r.type == PROVIDER_TYPE)
    resources[p] = dataclasses.replace(resources[p], inputs={**resources[p].inputs, "context": "foxhunt-prod"})
    broken = dataclasses.replace(result, run=dataclasses.replace(result.run, resources=resources))
    problems = check_render(broken)
    assert "the provider's context is 'foxhunt-prod', the stack config names 'foxhunt-dev'" in problems
    assert any("kubernetes:apps/v1:DaemonSet 'gpu-poller' is not created through the stack's provider" in p
               for p in problems)  # fmt: skip


def test_render_refuses_a_default_provider_context_that_names_another_cluster(tmp_path):
    text = (REPO_ROOT / "Pulumi.prod.yaml").read_text()
    (tmp_path / "Pulumi.prod.yaml").write_text(
        text.replace("config:\n", "config:\n  kubernetes:context: foxhunt-dev\n")
    )
    with pytest.raises(SettingsError, match=r"kubernetes:context = 'foxhunt-dev' but kubeContext = 'foxhunt-prod'"):
        validate_stack(read_stack_config("prod", root=tmp_path))


def test_live_run_guard_refuses_a_kubeconfig_without_the_named_context(tmp_path):
    settings = validate_stack(read_stack_config("prod"))
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(kubeconfig("foxhunt-dev", "foxhunt-prod", current="foxhunt-dev"))
    wrong.write_text(kubeconfig("foxhunt-dev", current="foxhunt-dev"))
    guard_live_run(settings, None, {"KUBECONFIG": str(right)})  # the current context does not matter
    with pytest.raises(ProviderContextError, match=r"kubeContext 'foxhunt-prod' is not a context of .*foxhunt-dev"):
        guard_live_run(settings, None, {"KUBECONFIG": str(wrong)})
    with pytest.raises(ProviderContextError, match="no kubeconfig found"):
        guard_live_run(settings, None, {"KUBECONFIG": str(tmp_path / "absent")})
    with pytest.raises(ProviderContextError, match="kubernetes:context = 'foxhunt-dev'"):
        guard_live_run(settings, "foxhunt-dev", {"KUBECONFIG": str(right)})


def test_a_secret_kubeconfig_must_hold_the_named_context():
    assert context_problem("prod", "foxhunt-prod", kubeconfig("foxhunt-prod"), "the secret") is None
    assert "is not a context of the secret" in str(
        context_problem("prod", "foxhunt-prod", kubeconfig("x"), "the secret")
    )
    assert context_problem("prod", None, kubeconfig("a", current="a"), "the secret") is None
    assert "has no current-context" in str(context_problem("prod", None, kubeconfig("a"), "the secret"))


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.slow
def test_alertmanager_config_is_written_readably_with_secret_placeholders(rendered, stack, tmp_path):
    result = rendered[stack]
    text = result.files[ALERTMANAGER_PATH]
    document = yaml.safe_load(text)
    kinds = {"webhook_configs": "url", "slack_configs": "api_url", "pagerduty_configs": "routing_key"}
    credentials = {c[field] for r in document["receivers"] for kind, field in kinds.items() for c in r.get(kind, [])}
    known = ("alertPageWebhookUrl", "alertChatWebhookUrl", "alertLowPriorityWebhookUrl", "alertHeartbeatUrl",
             "alertSlackApiUrl", "alertPagerDutyRoutingKey")  # fmt: skip
    assert secret_placeholder("alertHeartbeatUrl") in credentials
    # (a PagerDuty routing key is not a URL: its placeholder is the host and key without the scheme)
    assert all(any(c.endswith(f"pulumi-secret.invalid/{k}") for k in known) for c in credentials), credentials
    assert "alerts.invalid" not in text
    path = tmp_path / "alertmanager.yaml"
    path.write_text(text)
    amtool = shutil.which("amtool") or "/usr/bin/amtool"
    proc = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_summary_counts_what_was_written(tmp_path, capsys):
    assert render.main(["--stack", "staging", "--out", str(tmp_path), "--no-check"]) == 0
    out = capsys.readouterr().out
    written = [p.relative_to(tmp_path / "staging") for p in (tmp_path / "staging").rglob("*") if p.is_file()]
    kube = [p for p in written if p.parts[0] == "kubernetes"]
    objects = int(re.search(r"(\d+) Kubernetes objects", out).group(1))  # type: ignore[union-attr]
    assert objects == len(kube)
    listed = re.findall(r"^\s+(\d+)\s+(.+)$", out, re.MULTILINE)
    assert sum(int(n) for n, _ in listed) == len(kube)
    line = next(ln for ln in out.splitlines() if ln.startswith("files written"))
    per_dir = {d: int(n) for d, n in re.findall(r"(\w+)/ (\d+)", line)}
    assert per_dir == {d: sum(1 for p in written if p.parts[0] == d) for d in {p.parts[0] for p in written}}
    assert line.endswith(f"({len(written)} in all)")
    assert Path(tmp_path / "staging" / "policy" / "pack-config.json").is_file()
