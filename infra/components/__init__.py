"""The Pulumi ComponentResources that put the observability stack onto the cluster.

One module per component; every child is parented to its component and every object has an
explicit name, an explicit namespace and the common labels.
"""

from infra.components.alert_routing import AlertRouting
from infra.components.alert_rules import AlertRules
from infra.components.gpu_poller import GpuPoller
from infra.components.grafana import GrafanaProvisioning
from infra.components.scrape_discovery import ScrapeDiscovery
from infra.components.service_scrape import ServiceScrapeAnnotations
from infra.components.training_job import TrainingJobTemplate

__all__ = [
    "AlertRouting",
    "AlertRules",
    "GpuPoller",
    "GrafanaProvisioning",
    "ScrapeDiscovery",
    "ServiceScrapeAnnotations",
    "TrainingJobTemplate",
]
