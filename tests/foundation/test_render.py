"""The offline render: every stack renders under the mock engine, deterministically; bad input
exits non-zero, says what is wrong, and writes nothing."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from infra import REPO_ROOT
from infra.offline import artifacts, checks, render
from infra.offline.mock_engine import normalize
from infra.offline.result import kubernetes_manifest
from infra.settings import SettingsError, available_stacks

STACKS = available_stacks()


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.offline.render", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("stack", STACKS)
def test_stack_renders_every_kind_of_output(stack: str, tmp_path: Path) -> None:
    result = render.render_stack(stack)
    assert result.run.resources, "the program registered nothing"
    assert result.manifests
    for name, manifest in result.manifests.items():
        assert name.startswith("kubernetes/") and name.endswith(".yaml")
        kind_part, namespace, _ = Path(name).stem.split("_", 2)
        assert manifest["kind"].lower() in kind_part
        assert manifest["metadata"]["namespace"] == namespace
    target = render.write_rendered(result, tmp_path)
    written = {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()}
    assert written == set(result.files)


@pytest.mark.slow
def test_render_is_byte_identical_across_processes(tmp_path: Path) -> None:
    digests = []
    for attempt in ("a", "b"):
        out = tmp_path / attempt
        for stack in STACKS:
            proc = run_cli("--stack", stack, "--out", str(out), "--no-check")
            assert proc.returncode == 0, proc.stderr
        digests.append(tree_digest(out))
    assert digests[0] == digests[1]
    assert len(digests[0]) > 3


@pytest.mark.slow
def test_cli_prints_a_summary(tmp_path: Path) -> None:
    proc = run_cli("--stack", "dev", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "stack dev:" in proc.stdout and "Kubernetes objects" in proc.stdout
    assert "files written to" in proc.stdout and "rendered in" in proc.stdout


def test_unknown_stack_fails_and_writes_nothing(tmp_path: Path) -> None:
    proc = run_cli("--stack", "qa", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "unknown stack 'qa'" in proc.stderr and ", ".join(STACKS) in proc.stderr
    assert not (tmp_path / "out").exists()


def test_bad_config_fails_before_any_resource_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    text = (REPO_ROOT / "Pulumi.dev.yaml").read_text().replace("mode: annotations", "mode: telepathy")
    (root / "Pulumi.broken.yaml").write_text(text)
    with pytest.raises(SettingsError, match=r"scrape.mode = 'telepathy'"):
        render.render_stack("broken", root=root)
    # and through the CLI: a stack file with bad config exits non-zero and leaves no output
    broken = REPO_ROOT / "Pulumi.broken-test.yaml"
    broken.write_text(text)
    try:
        proc = run_cli("--stack", "broken-test", "--out", str(tmp_path / "out"))
    finally:
        broken.unlink()
    assert proc.returncode == 2
    assert "scrape.mode = 'telepathy': expected one of 'annotations', 'operator'" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_rerender_replaces_stale_files(tmp_path: Path) -> None:
    result = render.render_stack("dev")
    target = render.write_rendered(result, tmp_path)
    (target / "stale.yaml").write_text("old")
    render.write_rendered(result, tmp_path)
    assert not (target / "stale.yaml").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging dir left behind"


def test_mock_engine_restores_integers() -> None:
    assert kubernetes_manifest is not None
    assert normalize({"a": [1.0, 2.5, {"b": 3.0}]}) == {"a": [1, 2.5, {"b": 3}]}
    assert isinstance(normalize(9400.0), int)


@pytest.mark.slow
def test_render_checks_catch_a_real_policy_violation() -> None:
    result = render.render_stack("dev")
    assert checks.check_policies(result) == []
    daemonset = next(m for m in result.manifests.values() if m["kind"] == "DaemonSet")
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    # the policies read the registered resources: mutate the same object there
    resource = next(r for r in result.run.resources if r.type == "kubernetes:apps/v1:DaemonSet")
    resource.inputs["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    problems = checks.check_policies(result)
    assert any("privileged" in p and "gpu-poller" in p for p in problems), problems


@pytest.mark.slow
def test_render_checks_catch_a_broken_rules_file() -> None:
    result = render.render_stack("dev")
    assert checks.check_rules_with_promtool(result) == []
    result.files[artifacts.RULES_PATH] += "  - name: broken\n    rules:\n      - record: x\n        expr: rate(\n"
    assert checks.check_rules_with_promtool(result)


def test_a_failed_check_exits_1_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "ALL_CHECKS", [("always-fails", lambda result: ["a problem"])])
    assert render.main(["--stack", "dev", "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()
