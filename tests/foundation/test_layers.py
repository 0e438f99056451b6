"""The code flows one way. In `infra/`: settings -> components -> generated content -> program; then
the offline tooling in `infra/offline/`: rendered result -> files -> checks -> render CLI, with no import pointing back up; and no package
hides a cycle behind an import inside a function."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from bench import http_limits
from bench.fleet import baseline
from infra import REPO_ROOT

# Lower layers first; a module may import only modules of earlier layers (or, inside the
# settings and components packages, earlier modules of the same package).
INFRA_LAYERS: list[list[str]] = [
    ["infra", "infra.offline", "infra.offline.mock_engine", "infra.stacks"],
    [
        "infra.settings.typed",
        "infra.settings.reading",
        "infra.settings.sections",
        "infra.settings.loading",
        "infra.settings.stack_files",
        "infra.settings",
    ],
    [
        "infra.components.common",
        "infra.components.alert_routing",
        "infra.components.alert_rules",
        "infra.components.gpu_poller",
        "infra.components.grafana",
        "infra.components.network_policies",
        "infra.components.scrape_credentials",
        "infra.components.scrape_discovery",
        "infra.components.service_scrape",
        "infra.components.training_job",
        "infra.components",
    ],
    ["infra.generated_content", "infra.kube_provider", "infra.outputs"],
    ["infra.program"],
    ["infra.offline.result"],
    ["infra.offline.artifacts"],
    ["infra.offline.schema_check", "infra.offline.policy_context"],
    ["infra.offline.checks"],
    ["infra.offline.render", "infra.offline.regenerate", "infra.__main__", "infra.offline.review_diff"],
]
ORDERED_PACKAGES = ("infra.settings", "infra.components")
PACKAGES = ("infra", "observability", "dashboards", "poller", "policy")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO_ROOT / package).rglob("*.py"))}


def imported(tree: ast.AST, known: set[str]) -> set[str]:
    """Project modules a module imports (`from pkg import submodule` counts as the submodule)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif node.module in known:
                    found.add(node.module)
    return found


def rank(name: str) -> tuple[int, int]:
    for layer, names in enumerate(INFRA_LAYERS):
        if name in names:
            return layer, names.index(name)
    raise AssertionError(f"{name} is in no layer of INFRA_LAYERS: place it")


def test_every_infra_module_has_a_layer() -> None:
    for name in modules("infra"):
        rank(name)


def test_infra_imports_point_only_down() -> None:
    known = set(modules("infra"))
    problems = []
    for name, path in modules("infra").items():
        for target in imported(ast.parse(path.read_text()), known):
            if target == "infra" or target == name:
                continue
            same_package = any(name.startswith(p) and target.startswith(p) for p in ORDERED_PACKAGES)
            layer_ok = rank(target)[0] < rank(name)[0]
            if not layer_ok and not (same_package and rank(target) < rank(name)):
                problems.append(f"{name} imports {target}, which is not below it")
    assert not problems, "\n".join(problems)


def function_level_imports(tree: ast.AST, known: set[str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom) and imported(inner, known):
                    found.append(f"line {inner.lineno}: {', '.join(sorted(imported(inner, known)))}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_project_import_inside_a_function(package: str) -> None:
    known = {name for p in PACKAGES for name in modules(p)}
    problems = [
        f"{name} {where}"
        for name, path in modules(package).items()
        for where in function_level_imports(ast.parse(path.read_text()), known)
    ]
    assert not problems, "an import inside a function hides a cycle; move it to the top:\n" + "\n".join(problems)


def test_the_pulumi_program_imports_no_offline_tooling() -> None:
    """`infra/` is the program; `infra/offline/` renders, checks and diffs it and is never deployed."""
    known = set(modules("infra"))
    for name, path in modules("infra").items():
        if name.startswith("infra.offline"):
            continue
        for target in imported(ast.parse(path.read_text()), known):
            assert not target.startswith("infra.offline"), f"{name} imports {target}: the program needs no tooling"


# PromQL is read in one package; outside it, the parser is imported only to rewrite expressions.
PROMQL_PACKAGE = "observability.promql"
PROMQL_REWRITERS = frozenset({"dashboards.clusters", "observability.rules.pushdown"})
# What the PromQL package may import of the project: the metric catalog it types expressions by.
PROMQL_MAY_IMPORT = frozenset({"observability", "foxhunt_trainer.contract.catalog"})


def _imports_promql_parser(tree: ast.AST) -> bool:
    return any(
        (isinstance(node, ast.Import) and any(a.name == "promql_parser" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and node.module == "promql_parser")
        for node in ast.walk(tree)
    )


def test_promql_is_read_in_one_package() -> None:
    readers = [
        name
        for package in PACKAGES
        for name, path in modules(package).items()
        if not name.startswith(PROMQL_PACKAGE) and _imports_promql_parser(ast.parse(path.read_text()))
    ]
    assert set(readers) <= PROMQL_REWRITERS, (
        f"{sorted(set(readers) - PROMQL_REWRITERS)} parse PromQL themselves: use observability.promql.syntax "
        "(or add the analysis there)"
    )


def test_the_promql_package_imports_only_the_catalog() -> None:
    known = {name for p in PACKAGES for name in modules(p)}
    for name, path in modules("observability").items():
        if not name.startswith(PROMQL_PACKAGE):
            continue
        outside = {t for t in imported(ast.parse(path.read_text()), known) if not t.startswith(PROMQL_PACKAGE)}
        assert outside <= PROMQL_MAY_IMPORT, (
            f"{name} imports {sorted(outside - PROMQL_MAY_IMPORT)}: it must stay below them"
        )


def test_no_module_imports_a_private_name_of_another_package() -> None:
    """`from pkg.mod import _helper` across top-level packages borrows what the other package does not offer."""
    problems = []
    for package in PACKAGES:
        for name, path in modules(package).items():
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                other = node.module.split(".")[0]
                if other in PACKAGES and other != package:
                    problems += [f"{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not problems, "private names used across packages:\n" + "\n".join(problems)


# Tests and benchmarks share the harness package (Prometheus, Alertmanager, fake NVML, webhook sink,
# the synthetic trainer process) and reach no further into each other: no test imports a private
# bench module, no benchmark imports the tests, and the harness imports neither.
def absolute_imports(tree: ast.AST) -> set[str]:
    """Every module an import statement names (`from a import b` names a and a.b), and every string
    constant that reads as a module path or a file path of the repository (`-m bench._x`, "tests/...")."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip()
            if " " not in text and text.startswith(("tests.", "tests/", "bench.", "bench/")):
                found.add(text.removesuffix(".py").replace("/", "."))
    return found


def private_bench_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "bench" and any(p.startswith("_") for p in parts[1:])


def test_tests_and_benchmarks_meet_only_in_the_harness() -> None:
    problems = []
    for package, forbidden in (
        ("tests", private_bench_module),
        ("bench", lambda n: n.split(".")[0] == "tests"),
        ("harness", lambda n: n.split(".")[0] in ("tests", "bench")),
    ):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path == Path(__file__).resolve():  # names the forbidden modules as examples
                continue
            for name in sorted(absolute_imports(ast.parse(path.read_text()))):
                if forbidden(name):
                    problems.append(f"{path.relative_to(REPO_ROOT)} uses {name}")
    assert not problems, "tests and benchmarks share harness/ and nothing else:\n" + "\n".join(problems)


def test_the_layering_check_sees_what_it_forbids() -> None:
    code = 'from bench._prometheus import free_port\nimport bench._x\nfrom bench import fleet\nrun("-m", "bench._previous_server")'
    names = absolute_imports(ast.parse(code))
    assert {n for n in names if private_bench_module(n)} == {
        "bench._prometheus",
        "bench._prometheus.free_port",
        "bench._x",
        "bench._previous_server",
    }
    assert "tests.poller.fake_nvml" in absolute_imports(ast.parse('importlib.import_module("tests.poller.fake_nvml")'))


def test_the_baselines_name_revisions_of_this_history() -> None:
    """The benchmarks' previous designs are commits of this repository, read with git archive."""
    for revision in (http_limits.PREVIOUS_REVISION, baseline.PREVIOUS_REVISION):
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{revision}^{{commit}}"], capture_output=True, check=False
        )
        assert done.returncode == 0, f"{revision} is not in this clone's history (a shallow clone?)"
    assert not (REPO_ROOT / "bench" / "_previous_design.py").exists()
    assert not (REPO_ROOT / "bench" / "_previous_server.py").exists()
