"""The Pulumi ComponentResources that put the observability stack onto the cluster.

One module per component. Each takes its name and a typed `...Args` (the slice of the stack
settings it needs, plus generated content where it carries some); every child is parented to
its component and named after it, and every object has an explicit name, an explicit namespace
and the common labels.
"""

from infra.components.alert_routing import AlertRouting, AlertRoutingArgs
from infra.components.alert_rules import AlertRules, AlertRulesArgs
from infra.components.common import OtelExport
from infra.components.gpu_poller import GpuPoller, GpuPollerArgs
from infra.components.grafana import GrafanaProvisioning, GrafanaProvisioningArgs
from infra.components.network_policies import NetworkIsolation, NetworkIsolationArgs, OwnedPods
from infra.components.scrape_credentials import ScrapeCredentials, ScrapeCredentialsArgs
from infra.components.scrape_discovery import ScrapeDiscovery, ScrapeDiscoveryArgs
from infra.components.service_scrape import ServiceScrapeAnnotations, ServiceScrapeArgs
from infra.components.training_job import TrainingJobArgs, TrainingJobTemplate

__all__ = [
    "AlertRouting",
    "AlertRoutingArgs",
    "AlertRules",
    "AlertRulesArgs",
    "GpuPoller",
    "GpuPollerArgs",
    "GrafanaProvisioning",
    "GrafanaProvisioningArgs",
    "NetworkIsolation",
    "NetworkIsolationArgs",
    "OtelExport",
    "OwnedPods",
    "ScrapeCredentials",
    "ScrapeCredentialsArgs",
    "ScrapeDiscovery",
    "ScrapeDiscoveryArgs",
    "ServiceScrapeAnnotations",
    "ServiceScrapeArgs",
    "TrainingJobArgs",
    "TrainingJobTemplate",
]
