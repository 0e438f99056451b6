"""`make diff STACK=x [BASE=ref]`: renders the base commit and the working tree of a copy of this
repository and prints what a change does to rendered/<stack>/, file by file, normalised."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.repo_copy import commit_all, copy_repo

# Each runs the project's own tools and tests (renders, promtool, the policy pack) in a copy of the
# repository: tens of seconds apiece.
pytestmark = pytest.mark.slow


def make_diff(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # `-o .venv/.deploy`: the copy shares this checkout's virtualenv; make must not reinstall into it
        ["make", "--no-print-directory", "-o", ".venv/.deploy", "diff", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )


def set_threshold(repo: Path, key: str, value: float) -> float:
    path = repo / "observability" / "thresholds.yaml"
    text = path.read_text()
    old = yaml.safe_load(text)[key]["value"]
    new = re.sub(rf"^{key}: {{value: [^,]+,", f"{key}: {{value: {value:g},", text, count=1, flags=re.M)
    assert new != text, f"no record {key} in {path}"
    path.write_text(new)
    return float(old)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("diff") / "repo")


def test_an_unchanged_tree_has_no_difference(repo):
    proc = make_diff(repo, "STACK=dev")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rendered/dev: 0 changed, 0 added, 0 removed (HEAD (")
    assert "no difference in the rendered output" in proc.stdout


def test_a_threshold_change_shows_in_rules_and_dashboards_only_then_against_a_base_ref(repo):
    old = set_threshold(repo, "gpuTemperatureHighCelsius", 80)
    proc = make_diff(repo, "STACK=dev")
    assert proc.returncode == 0, proc.stderr
    changed = {line[4:].split(" (")[0] for line in proc.stdout.splitlines() if line.startswith("=== ")}
    assert "prometheus/rules.yaml" in changed
    assert "dashboards/ml-training-comprehensive.json" in changed
    assert "kubernetes/configmap_monitoring-dev_foxhunt-ml-rules.yaml" in changed
    # secrets placeholders and everything the threshold does not reach stay out of the diff
    assert not any(name.startswith(("alertmanager/", "grafana/")) for name in changed), changed
    for line in (
        # the GPU alert group's recorded input, then the alert reading it
        rf"-\s+expr: max by \(node, gpu_id, uuid, gpu_name\) \(ml_gpu_temperature_celsius > {old:g}\)",
        r"\+\s+expr: max by \(node, gpu_id, uuid, gpu_name\) \(ml_gpu_temperature_celsius > 80\)",
        r"\+\s+gpu:ml_gpu_temperature_celsius:too_hot > 80",
        r"\+\s+summary: A GPU has been hotter than 80 °C for 2 minutes\.",
        r'\+\s+"description": "Core temperature; throttling risk above 80 °C\..*",',  # JSON, unescaped
    ):
        assert re.search(f"^{line}$", proc.stdout, re.MULTILINE), line
    # the same change, committed, against BASE=HEAD~1; as the pull request's markdown comment
    commit_all(repo, "cooler GPUs")
    proc = make_diff(repo, "STACK=dev", "BASE=HEAD~1", "DIFF_FORMAT=markdown")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("### `make diff STACK=dev`")
    assert "<details><summary><code>prometheus/rules.yaml</code> (changed)</summary>" in proc.stdout
    assert "```diff\n--- a/prometheus/rules.yaml" in proc.stdout
    assert "(ml_gpu_temperature_celsius > 80)" in proc.stdout


def test_a_new_stack_is_all_added_and_a_broken_tree_fails(repo):
    (repo / "Pulumi.gpu-lab.yaml").write_text((repo / "Pulumi.dev.yaml").read_text())
    proc = make_diff(repo, "STACK=gpu-lab")
    assert proc.returncode == 0, proc.stderr
    assert "the stack 'gpu-lab' does not exist at HEAD" in proc.stdout
    assert " 0 changed, " in proc.stdout.splitlines()[0] and " 0 removed " in proc.stdout.splitlines()[0]
    (repo / "Pulumi.gpu-lab.yaml").write_text("config:\n  foxhunt-observability:environment: [\n")
    proc = make_diff(repo, "STACK=gpu-lab")
    assert proc.returncode != 0
    assert "the working tree does not render" in proc.stderr and "Pulumi.gpu-lab.yaml" in proc.stderr
