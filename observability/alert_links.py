"""Where a notification sends the person it reaches: the dashboard that shows the alert's job,
node or GPU.

Every alert carries a `dashboard_url` annotation (a Prometheus template over the alert's labels):
the training cockpit filtered to the job (and the node of the GPU) when the alert names a job, the
infra cockpit filtered to the node when it names a node but no job, else the dashboard of its area.
The notification templates (`observability.notifications`) append the time range around the
alert. The dashboards take their UIDs from here, so a link cannot point at a renamed dashboard.
"""

from __future__ import annotations

from collections.abc import Sequence

from observability.config import ObservabilityConfig

TRAINING_COCKPIT_UID = "foxhunt-training-cockpit"
INFRA_COCKPIT_UID = "foxhunt-infra-cockpit"
# The dashboard variables a link sets (the dashboards define them under these names).
TRAINING_COCKPIT_VARIABLES = {"model_type": "model", "job_id": "job_id", "node": "node"}
INFRA_COCKPIT_VARIABLES = {"node": "node"}
# Groups whose alerts without a job or node are about the GPUs and the monitoring itself.
INFRA_GROUPS = ("ml_gpu_resources", "ml_monitoring_health")


def dashboard_base(cfg: ObservabilityConfig, uid: str) -> str:
    return f"{cfg.grafana_url.rstrip('/')}/d/{uid}?orgId=1"


def _query(variables: dict[str, str], labels: Sequence[str], *, optional: bool = True) -> str:
    """The variables set from the alert's labels; `optional`: each only when the alert carries it
    (a poller that never answered has no node)."""

    def one(label: str) -> str:
        part = f"&var-{variables[label]}={{{{ $labels.{label} }}}}"
        return f"{{{{ if $labels.{label} }}}}{part}{{{{ else }}}}{{{{ end }}}}" if optional else part

    return "".join(one(label) for label in variables if label in labels)


def dashboard_url_template(cfg: ObservabilityConfig, group: str, locating_labels: Sequence[str]) -> str:
    """The `dashboard_url` annotation of an alert of `group` located by `locating_labels`."""
    training = dashboard_base(cfg, TRAINING_COCKPIT_UID)
    infra = dashboard_base(cfg, INFRA_COCKPIT_UID)
    if "job_id" in locating_labels and "node" in locating_labels:
        # a GPU alert: the job holding the GPU when there is one, else the GPU's node
        held = _query(TRAINING_COCKPIT_VARIABLES, locating_labels, optional=False)
        unheld = _query(INFRA_COCKPIT_VARIABLES, locating_labels, optional=False)
        return f"{{{{ if $labels.job_id }}}}{training}{held}{{{{ else }}}}{infra}{unheld}{{{{ end }}}}"
    if "job_id" in locating_labels or ("model_type" in locating_labels and group not in INFRA_GROUPS):
        return training + _query(TRAINING_COCKPIT_VARIABLES, locating_labels)
    if "node" in locating_labels or group in INFRA_GROUPS:
        return infra + _query(INFRA_COCKPIT_VARIABLES, locating_labels)
    return training
