"""The Pulumi program, in one direction: typed settings (`infra.settings`) -> components and the
program (`infra.components`, `infra.artifacts`, `infra.program`) -> the rendered result
(`infra.result`) -> offline checks (`infra.checks`) -> the render CLI (`infra.render`)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
