"""The GPU alert group as it was before jobs owned their GPUs, read from that revision of this
repository, for the fleet benchmark's comparison.

Not deployed anywhere: the benchmark evaluates it on the same synthetic fleet, in the same run, next
to the current `ml_gpu_resources`, to show what judging utilization per job instead of per GPU
changes (active alerts at steady state, and the group's cost). At PREVIOUS_REVISION the utilization
alerts fired per GPU (every idle or saturated GPU, held by a job or not) and the hardware alerts read
the poller's series themselves, with no job join and no recorded inputs. The group is that
revision's own, built by its code from its default configuration in a separate interpreter; only
its name and evaluation interval are set here."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from harness.revision import revision_tree
from observability.config import ObservabilityConfig

# The last commit before per-job GPU rules (GPUUtilizationLow/Critical judged per job).
PREVIOUS_REVISION = "eb98df153dc433beb73da830e41d4959b12e9541"
GROUP = "ml_gpu_resources (previous design, not deployed)"
_SOURCE_GROUP = "ml_gpu_resources"

_SCRIPT = f"""
import json, sys
sys.path.insert(0, ".")
from observability.config import ObservabilityConfig
from observability.rules import rule_groups
print(json.dumps(next(g for g in rule_groups(ObservabilityConfig()) if g["name"] == {_SOURCE_GROUP!r})))
"""


def previous_gpu_group(cfg: ObservabilityConfig) -> dict[str, Any]:
    """`ml_gpu_resources` at PREVIOUS_REVISION (the six alerts as first written), evaluated at cfg's interval."""
    with revision_tree(PREVIOUS_REVISION) as tree:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _SCRIPT], cwd=tree, capture_output=True, text=True, check=False, timeout=120
        )
    if done.returncode != 0:
        raise RuntimeError(f"the GPU group of {PREVIOUS_REVISION[:12]} did not build: {done.stderr[-2000:]}")
    group: dict[str, Any] = json.loads(done.stdout)
    return {**group, "name": GROUP, "interval": f"{cfg.evaluation_interval_seconds}s"}
