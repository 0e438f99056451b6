"""Group `ml_monitoring_health`: the alerts that say the monitoring itself has gone blind.

- GPUPollerDown: a GPU node's poller target does not answer (and, with kube-state-metrics, a node
  with `nvidia.com/gpu` capacity has no poller answering at all: never scheduled, or gone).
- NVMLDown: the poller runs but cannot reach NVML.
- GPUsNotAnswering: a node answers fewer GPUs than NVML enumerates (or than its capacity).
- GPUPollerCollectionFailing / GPUPollerCollectionSlow: the poller's NVML passes fail or crawl.
- RuleGroupEvaluationFailures / RuleGroupSlow: the project's own rule groups fail, or take more
  than a share of their interval (the fleet is outgrowing the Prometheus that evaluates them).
- PrometheusReplicaDown / PrometheusShardDown: one replica of a scrape shard has stopped writing to
  the global tier while another still does (the shard still serves), or none does (the shard's
  targets are unwatched). Each shard replica records `shard:up:timestamp_max`, its latest scrape
  (the partial of `fleet:up:timestamp_max`), which reaches the global tier with the shard's number
  and the replica label. They read each replica's copy on purpose (they name the replica label).
  With one shard and replicas (no global tier) the replicas scrape each other instead, and
  PrometheusReplicaDown fires on a survivor while a peer's `up` is 0; when all are down nothing
  evaluates, and the Watchdog's dead man's switch pages.
- PrometheusRemoteWriteBehind / PrometheusRemoteWriteFailing / PrometheusRemoteWriteRetrying: a
  shard's remote-write queue to the global tier lags (its oldest unsent sample), loses samples, or
  keeps resending them.
- Watchdog: always firing. Alertmanager sends it, and only it, to the heartbeat receiver every
  minute; an external dead man's switch pages when the heartbeat stops, which is the only way to
  notice that Prometheus, Alertmanager or the path between them is dead.

The rule-group alerts read Prometheus' own metrics (`prometheus_rule_*`), so the Prometheus that
evaluates these rules must scrape itself. They watch only the project's groups: `rule_group` is
"<file>;<group name>", and the group names come from the rules this package renders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from foxhunt_trainer.contract import catalog
from observability.config import ObservabilityConfig
from observability.partials import SHARD_LABEL
from observability.prometheus_config import PROMETHEUS_REPLICAS_JOB
from observability.promql import by, duration, on
from observability.rules.rule_types import AlertRule, RecordingRule, RunbookQuery, Severity

GROUP = "ml_monitoring_health"
# Names other modules route or inhibit on.
WATCHDOG = "Watchdog"
POLLER_DOWN = "GPUPollerDown"
NVML_DOWN = "NVMLDown"
GPUS_NOT_ANSWERING = "GPUsNotAnswering"
COLLECTION_FAILING = "GPUPollerCollectionFailing"

DOWN_FOR_SECONDS = 300  # poller down, NVML down, GPUs not answering
RULE_FAILURE_WINDOW_SECONDS = 300
# How far back the last sample of a poller's own series names the node of a target that went down.
NODE_MEMORY_SECONDS = 3600
GPU_RESOURCE = "nvidia_com_gpu"  # kube-state-metrics' spelling of the `nvidia.com/gpu` resource

_NODE = "node {{ $labels.node }}"
_ONE_NODE = '{node="<node>"}'
_GROUP_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


# The latest scrape in the fleet (Unix seconds). Pushed down, each shard replica records its own
# latest scrape as the partial `REPLICA_HEARTBEAT`, which reaches the global tier with the shard's
# number and the replica label: it says which replicas still write.
LATEST_SCRAPE = "fleet:up:timestamp_max"
REPLICA_HEARTBEAT = "shard:up:timestamp_max"
# How far back the global tier remembers a replica that stopped writing.
REPLICA_MEMORY_SECONDS = 3600
REPLICA_DOWN_FOR_SECONDS = 120
REMOTE_WRITE_FOR_SECONDS = 300
_QUEUE_LABELS = ("instance", "remote_name", "url")
REPLICA_ALERTS = ("PrometheusReplicaDown", "PrometheusShardDown")


def input_rules(cfg: ObservabilityConfig) -> tuple[RecordingRule, ...]:
    """The latest scrape, whose partial on each shard is the replicas' heartbeat (module doc)."""
    return (
        RecordingRule(
            LATEST_SCRAPE,
            f"max(timestamp({catalog.UP.name}))",
            "The latest scrape of the fleet (Unix seconds); on a sharded stack each shard replica's own "
            f"({REPLICA_HEARTBEAT}) tells the global tier which replicas still write.",
        ),
    )


def _replica_age(cfg: ObservabilityConfig, comparison: str) -> str:
    """Per shard, how many of its replicas last wrote longer ago (`>`) or not (`<=`) than allowed."""
    memory = duration(REPLICA_MEMORY_SECONDS)
    return (
        f"count {by((SHARD_LABEL,))} (\n  max {by((SHARD_LABEL, cfg.replica_label))} "
        f"(time() - last_over_time({REPLICA_HEARTBEAT}[{memory}]))\n  {comparison} "
        f"{cfg.thresholds.prometheus_replica_silent_seconds.promql}\n)"
    )


# The replicas' own scrapes of each other (unsharded pair): kube-prometheus' ServiceMonitor also
# scrapes each pod's config reloader in the job (endpoint `reloader-web`); the annotations-mode job
# has no `endpoint` label.
_PAIR_UP = f'{catalog.UP.name}{{job="{PROMETHEUS_REPLICAS_JOB}", endpoint=~"|web"}}'
BOTH_DOWN = (
    "When every replica is down, no Prometheus evaluates anything, this alert included: the Watchdog "
    "heartbeat stops and the external dead man's switch pages."
)


def pair_replica_alert(cfg: ObservabilityConfig) -> AlertRule:
    """An unsharded replicated Prometheus: each replica scrapes every replica of the pair (job
    `PROMETHEUS_REPLICAS_JOB`) and alerts while a peer does not answer and another one does."""
    return AlertRule(
        name="PrometheusReplicaDown",
        group=GROUP,
        severity=Severity.WARNING,
        expr=f"{_PAIR_UP} == 0\nand on ()\ncount({_PAIR_UP} == 1)",
        for_seconds=REPLICA_DOWN_FOR_SECONDS,
        summary="A Prometheus replica does not answer its peers' scrapes; another replica still does.",
        description=(
            "Prometheus replica {{ $labels.instance }} has not answered the other replicas' scrapes for 2m; "
            "a replica still answers, so the targets are watched and their alerts still fire."
        ),
        impact=(
            "None yet: the surviving replica scrapes and alerts alone. One more failure and nothing is watched "
            "(the Watchdog heartbeat stops and the dead man's switch pages)"
        ),
        action=(
            f"Find the silent replica: the query below lists each replica's `up` in job `{PROMETHEUS_REPLICAS_JOB}` "
            "(`instance` names its address)",
            "Check the replica's pod (`kubectl -n <namespace> get pods -l app.kubernetes.io/name=prometheus`): crash "
            "loop, OOM kill, a node lost, a full volume (its WAL replay after a restart takes minutes on a large head)",
            "While it is down its copy of the series has a hole: dashboards reading it show the gap",
        ),
        locating_labels=("instance",),
        queries=(RunbookQuery("Each replica as the others scrape it (1 answers, 0 does not)", _PAIR_UP),),
        rationale=_PAIR_RATIONALE,
    )


_PAIR_RATIONALE = (
    f"On a stack with one shard and replicas there is no global tier: every replica scrapes every replica "
    f"(job `{PROMETHEUS_REPLICAS_JOB}`) and fires while a replica's `up` is 0 and another's is 1. Each "
    "survivor fires it; Alertmanager gets one alert, because alerts drop the replica label. " + BOTH_DOWN
)


def replica_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    """A shard's replicas as the global tier sees them write (module doc); on an unsharded
    replicated stack, the replicas as they see each other answer."""
    if cfg.replicated_pair:
        return (pair_replica_alert(cfg),)
    silent = cfg.thresholds.prometheus_replica_silent_seconds
    stale, fresh = _replica_age(cfg, ">"), _replica_age(cfg, "<=")
    label = cfg.replica_label
    replicas_query = (
        RunbookQuery(
            "Seconds since each replica of each shard last wrote",
            f"time() - last_over_time({REPLICA_HEARTBEAT}[1h])",
        ),
        RunbookQuery(
            "Evaluations each replica wrote in the last 10 minutes (a restarting one has a hole)",
            f"count_over_time({REPLICA_HEARTBEAT}[10m])",
        ),
    )
    common_actions = (
        f"Find the silent replica: the query below lists each `{SHARD_LABEL}` and `{label}` with the seconds "
        "since it last wrote",
        "Check the replica's pod (`kubectl -n <namespace> get pods -l app.kubernetes.io/name=prometheus`): crash "
        "loop, OOM kill, a node lost, a full volume (its WAL replay after a restart takes minutes on a large head)",
        "Check its remote write to the global tier (PrometheusRemoteWriteBehind, its log's remote-write errors)",
    )
    return (
        AlertRule(
            name="PrometheusReplicaDown",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{stale}\nand {on((SHARD_LABEL,))}\n{fresh}",
            for_seconds=REPLICA_DOWN_FOR_SECONDS,
            summary=(
                f"A replica of a Prometheus shard has not written to the global tier for {silent.text}; another "
                "replica still does."
            ),
            description=(
                f'{{{{ printf "%.0f" $value }}}} replica(s) of shard {{{{ $labels.{SHARD_LABEL} }}}} have not written '
                f"to the global tier for more than {silent.short}, for 2m; the shard's other replica still "
                "writes, so its targets are watched and its alerts still fire."
            ),
            impact=(
                "None yet: the surviving replica scrapes, alerts and writes alone. One more failure and the "
                "shard's targets are unwatched (PrometheusShardDown)"
            ),
            action=common_actions,
            locating_labels=(SHARD_LABEL,),
            queries=replicas_query,
            rationale=(
                "Each shard replica records its latest scrape as a partial, which reaches the global tier with "
                f"the shard's number and the replica label `{label}`; a replica whose last one is older than "
                f"{silent.short} while another's is fresh is down. The global tier remembers a replica for 1h "
                "(then a replica gone for good is forgotten). " + _PAIR_RATIONALE
            ),
        ),
        AlertRule(
            name="PrometheusShardDown",
            group=GROUP,
            severity=Severity.CRITICAL,
            expr=f"{stale}\nunless {on((SHARD_LABEL,))}\n{fresh}",
            for_seconds=REPLICA_DOWN_FOR_SECONDS,
            summary=f"No replica of a Prometheus shard has written to the global tier for {silent.text}.",
            description=(
                f"No replica of shard {{{{ $labels.{SHARD_LABEL} }}}} has written to the global tier for more than "
                f"{silent.short}, for 2m: the shard's targets are unwatched and its alerts cannot fire."
            ),
            impact=(
                "The shard's GPUs and training jobs are unwatched: a hot or failing GPU there pages no one, and "
                "every fleet figure of the global tier misses the shard"
            ),
            action=common_actions,
            locating_labels=(SHARD_LABEL,),
            queries=replicas_query,
            rationale=(
                "As PrometheusReplicaDown, when no replica of the shard is fresh. After the global tier's own "
                "outage the shards' queues resend their backlog; the 2m `for` lets them catch up first."
            ),
        ),
    )


def remote_write_alerts(cfg: ObservabilityConfig) -> tuple[AlertRule, ...]:
    """Each shard's remote-write queue to the global tier, as it reports it (its own metrics)."""
    behind = cfg.thresholds.remote_write_behind_seconds
    window = duration(REMOTE_WRITE_FOR_SECONDS)
    queue = by(_QUEUE_LABELS)
    highest = catalog.PROMETHEUS_REMOTE_STORAGE_HIGHEST_TIMESTAMP_IN_SECONDS.name
    sent = catalog.PROMETHEUS_REMOTE_STORAGE_QUEUE_HIGHEST_SENT_TIMESTAMP_SECONDS.name
    failed = catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_FAILED_TOTAL.name
    retried = catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_RETRIED_TOTAL.name
    pending = catalog.PROMETHEUS_REMOTE_STORAGE_SAMPLES_PENDING.name
    lag = (
        f"max {queue} (\n  max_over_time({highest}[{window}])\n  - ignoring (remote_name, url) group_right\n"
        f"  max_over_time({sent}[{window}])\n)"
    )
    queries = (
        RunbookQuery("Oldest unsent sample's age per queue", lag),
        RunbookQuery("Samples pending per queue", f"sum {queue} ({pending})"),
        RunbookQuery(
            "Samples failed and retried per second", f"sum {queue} (rate({failed}[5m]) or rate({retried}[5m]))"
        ),
    )
    actions = (
        "Check the global tier (the queue's `url`): is it up and ready, does it accept remote write "
        "(`--web.enable-remote-write-receiver`), is it out of disk or memory",
        "Read the shard's log for remote-write errors (HTTP status, timeouts, out-of-order samples)",
        "The WAL holds about 2 hours: a queue that catches up within that loses nothing; past it, samples "
        "are dropped and the global tier's records have a gap",
    )
    return (
        AlertRule(
            name="PrometheusRemoteWriteBehind",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"{lag}\n> {behind.promql}",
            for_seconds=REMOTE_WRITE_FOR_SECONDS,
            summary=f"A shard's remote write to the global tier has been more than {behind.text} behind for 5 minutes.",
            description=(
                "The remote write {{ $labels.remote_name }} of Prometheus {{ $labels.instance }} to "
                "{{ $labels.url }} is "
                f"{{{{ $value | humanizeDuration }}}} behind (its oldest unsent sample), more than {behind.short}, "
                "for 5m: the global tier's records and dashboards lag by as much."
            ),
            impact=(
                "The global tier's fleet figures, global alerts and dashboards show the shard's data late; nothing "
                "is lost while the WAL still holds it (about 2 hours)"
            ),
            action=actions,
            locating_labels=_QUEUE_LABELS,
            queries=queries,
            rationale=(
                "The newest sample written to the WAL minus the newest sent, each the maximum of the last 5m (the "
                "Prometheus mixin's measure): the age of the oldest sample still to send."
            ),
        ),
        AlertRule(
            name="PrometheusRemoteWriteFailing",
            group=GROUP,
            severity=Severity.HIGH,
            expr=f"sum {queue} (increase({failed}[{window}])) > 0",
            for_seconds=0,
            summary="A shard's remote write dropped samples the global tier will never receive.",
            description=(
                "The remote write {{ $labels.remote_name }} of Prometheus {{ $labels.instance }} to "
                "{{ $labels.url }} gave up on "
                f'{{{{ printf "%.0f" $value }}}} samples in the last {window} (non-recoverable errors): the '
                "global tier's records have holes for them."
            ),
            impact="Samples are lost for the global tier: fleet figures and global alerts miss part of the shard",
            action=actions,
            locating_labels=_QUEUE_LABELS,
            queries=queries,
            rationale=(
                "A failed sample is dropped for good (HTTP 4xx from the receiver: out of order, too old, a "
                "relabelling that made two series one); a recoverable error is retried instead "
                "(PrometheusRemoteWriteRetrying)."
            ),
        ),
        AlertRule(
            name="PrometheusRemoteWriteRetrying",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"sum {queue} (rate({retried}[{window}])) > 0\nand {on(_QUEUE_LABELS)}\nsum {queue} ({pending}) > 0",
            for_seconds=REMOTE_WRITE_FOR_SECONDS,
            summary="A shard's remote write has kept resending samples to the global tier for 5 minutes.",
            description=(
                "The remote write {{ $labels.remote_name }} of Prometheus {{ $labels.instance }} to "
                "{{ $labels.url }} resends "
                '{{ printf "%.1f" $value }} samples per second, with samples pending, for 5m: the global '
                "tier is down or refuses them for now."
            ),
            impact=(
                "The global tier falls behind while the queue retries; the WAL keeps the samples for about 2 hours"
            ),
            action=actions,
            locating_labels=_QUEUE_LABELS,
            queries=queries,
            rationale=(
                "Retries are recoverable errors (5xx, timeouts, connection refused): the samples wait in the WAL."
            ),
        ),
    )


def rule_group_matcher(group_names: Sequence[str]) -> str:
    """A `rule_group` matcher for these groups, in any rule file (`<file>;<group>`)."""
    for name in group_names:
        if not _GROUP_NAME.fullmatch(name):
            raise ValueError(f"rule group name {name!r}: expected letters, digits and _ . : - only")
    names = "|".join(name.replace(".", "[.]") for name in sorted(set(group_names)))
    return f'rule_group=~".*;({names})"'


def _poller_down(cfg: ObservabilityConfig) -> str:
    up_down = f'{catalog.UP.name}{{service="{cfg.gpu_poller_service}"}} == 0'
    last_node = (
        f"max {by(('namespace', 'pod', 'node'))} "
        f"(last_over_time({catalog.GPU_POLLER_NVML_UP.name}[{duration(NODE_MEMORY_SECONDS)}]))"
    )
    expr = (
        f"(\n  ({up_down})\n  * {on(('namespace', 'pod'))} group_left (node)\n  {last_node}\n)\n"
        f"or {on(('namespace', 'pod'))}\n"
        f"({up_down})"
    )
    if cfg.kube_state_metrics:
        expr += (
            f"\nor {on(('node',))}\n"
            f'(\n  max {by(("node",))} ({catalog.KUBE_NODE_STATUS_CAPACITY.name}{{resource="{GPU_RESOURCE}"}} > 0)\n'
            f"  unless {on(('node',))}\n  {catalog.GPU_POLLER_NVML_UP.name}\n)"
        )
    return expr


def _gpus_not_answering(cfg: ObservabilityConfig) -> str:
    present = catalog.GPU_POLLER_DEVICES_ENUMERATED.name
    if cfg.kube_state_metrics:
        present = (
            f'\n    {present}\n    or\n    {catalog.KUBE_NODE_STATUS_CAPACITY.name}{{resource="{GPU_RESOURCE}"}}\n  '
        )
    return (
        f"(\n  max {by(('node',))} ({present})\n  -\n  max {by(('node',))} ({catalog.GPU_POLLER_DEVICES.name})\n) > 0"
    )


def health_alerts(cfg: ObservabilityConfig, project_groups: Sequence[str]) -> tuple[AlertRule, ...]:
    """The health group's alerts; `project_groups` names every rule group the project renders."""
    own = _own_health_alerts(cfg, project_groups)
    return (*own[:-1], *replica_alerts(cfg), *remote_write_alerts(cfg), own[-1])


def _own_health_alerts(cfg: ObservabilityConfig, project_groups: Sequence[str]) -> tuple[AlertRule, ...]:
    groups = rule_group_matcher(project_groups)
    poller = cfg.gpu_poller_service
    ksm = cfg.kube_state_metrics
    capacity_note = (
        " With kube-state-metrics, a node with `nvidia.com/gpu` capacity and no poller answering on it "
        "fires too (the poller was never scheduled there, or its pod is gone)."
        if ksm
        else " Without kube-state-metrics (stack setting `kubeStateMetrics`), a node where no poller pod "
        "exists at all cannot be told from a node without GPUs: set it where kube-state-metrics runs."
    )
    failure_window = duration(RULE_FAILURE_WINDOW_SECONDS)
    slow_pass = cfg.thresholds.gpu_poller_collection_slow_seconds
    slow_group = cfg.thresholds.rule_group_slow_interval_ratio
    return (
        AlertRule(
            name=POLLER_DOWN,
            group=GROUP,
            severity=Severity.HIGH,
            expr=_poller_down(cfg),
            for_seconds=DOWN_FOR_SECONDS,
            summary="A GPU node's poller has not answered for 5 minutes.",
            description=(
                "{{ if $labels.pod }}GPU poller pod {{ $labels.namespace }}/{{ $labels.pod }} has not answered "
                "its scrapes{{ else }}No GPU poller answers{{ end }} for 5m, on node "
                "{{ if $labels.node }}{{ $labels.node }}{{ else }}unknown (it never answered){{ end }}: "
                "GPU metrics and GPU alerts of that node are blind."
            ),
            impact=(
                "Nothing watches the node's GPUs: a hot, failing or lost GPU there raises no alert, and its GPU "
                "alerts are muted while this fires"
            ),
            action=(
                "Check the poller pod: `kubectl -n <namespace> describe pod <pod>` and its logs (crash loop, "
                "OOM kill, image pull, node not ready)",
                "Check the DaemonSet's desired and ready counts and whether the node's labels and taints still "
                "match its nodeSelector and tolerations",
                "Check that Prometheus reaches the pod on its metrics port (network policy, the pod's /healthz)",
            ),
            locating_labels=("namespace", "pod", "node"),
            queries=(
                RunbookQuery("Poller targets not answering", f'{catalog.UP.name}{{service="{poller}"}} == 0'),
                RunbookQuery(
                    "Nodes whose poller answered in the last hour but not now",
                    f"max by (node) (last_over_time({catalog.GPU_POLLER_NVML_UP.name}[1h])) "
                    f"unless on (node) {catalog.GPU_POLLER_NVML_UP.name}",
                ),
                RunbookQuery(
                    "GPU nodes without an answering poller (needs kube-state-metrics)",
                    f'max by (node) ({catalog.KUBE_NODE_STATUS_CAPACITY.name}{{resource="{GPU_RESOURCE}"}} > 0) '
                    f"unless on (node) {catalog.GPU_POLLER_NVML_UP.name}",
                ),
            ),
            rationale=(
                "A target that fails its scrapes is `up == 0`; the node comes from the last sample the poller "
                "itself exported within the last hour (`node` is not a scrape-target label), and a poller that "
                "never answered fires without a node." + capacity_note + " Inhibits the node's GPU alerts and "
                "its other poller health alerts (Alertmanager)."
            ),
        ),
        AlertRule(
            name=NVML_DOWN,
            group=GROUP,
            severity=Severity.HIGH,
            expr=f"max {by(('node',))} ({catalog.GPU_POLLER_NVML_UP.name}) == 0",
            for_seconds=DOWN_FOR_SECONDS,
            summary="The GPU poller on a GPU node has not reached NVML for 5 minutes.",
            description=(
                f"The GPU poller on {_NODE} cannot reach NVML (driver not loaded, library missing or NVML "
                "failing) and has reported no GPU for 5m."
            ),
            impact="The node's GPUs are unwatched: no utilization, memory, temperature or error alert can fire there",
            action=(
                "Read the poller's log on the node: it names the NVML error once (driver not loaded, library "
                "missing, version mismatch)",
                "Check the driver on the node: `nvidia-smi` on the host, the driver's kernel module, a driver "
                "upgrade in progress",
                "Check that the node runs the NVIDIA container runtime and that the poller pod got "
                "libnvidia-ml.so.1 (device plugin and runtime class)",
            ),
            locating_labels=("node",),
            queries=(
                RunbookQuery(
                    "NVML up on this node over the last hour", f"{catalog.GPU_POLLER_NVML_UP.name}{_ONE_NODE}[1h]"
                ),
                RunbookQuery(
                    "The poller's failures by reason",
                    f"increase({catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name}{_ONE_NODE}[1h])",
                ),
                RunbookQuery("Every node with NVML down", f"max by (node) ({catalog.GPU_POLLER_NVML_UP.name}) == 0"),
            ),
            rationale=(
                "The poller runs only on GPU nodes (its nodeSelector), so NVML down there is a fault, not a "
                "CPU-only node. Inhibits GPUsNotAnswering and GPUPollerCollectionFailing on the same node."
            ),
        ),
        AlertRule(
            name=GPUS_NOT_ANSWERING,
            group=GROUP,
            severity=Severity.WARNING,
            expr=_gpus_not_answering(cfg),
            for_seconds=DOWN_FOR_SECONDS,
            summary="A GPU node has had GPUs present that do not answer NVML for 5 minutes.",
            description=(
                f'{{{{ printf "%.0f" $value }}}} GPU(s) of {_NODE} are present but have not answered NVML for 5m '
                "(lost, or failing every query)."
            ),
            impact=(
                "Jobs scheduled on those GPUs fail or hang, and the GPUs are invisible to every GPU panel and alert"
            ),
            action=(
                "Find which GPUs: compare the node's GPU indices in the poller's series with those NVML "
                "enumerates, and read GPUErrorsDetected for the node (a lost GPU is counted there)",
                "Check `nvidia-smi` and the kernel log (`dmesg`: XID 79, fallen off the bus) on the node",
                "Drain the node and reset the GPU, or reboot the node and open a hardware ticket",
            ),
            locating_labels=("node",),
            queries=(
                RunbookQuery(
                    "GPUs enumerated and answering on this node",
                    f"{catalog.GPU_POLLER_DEVICES_ENUMERATED.name}{_ONE_NODE} "
                    f"or {catalog.GPU_POLLER_DEVICES.name}{_ONE_NODE}",
                ),
                RunbookQuery(
                    "Lost GPUs on this node (by index; uuid empty when never identified)",
                    f'{catalog.GPU_ERRORS_TOTAL.name}{{node="<node>", error_type="gpu_lost"}} > 0',
                ),
                RunbookQuery(
                    "The node's GPU capacity (needs kube-state-metrics)",
                    f'{catalog.KUBE_NODE_STATUS_CAPACITY.name}{{node="<node>", resource="{GPU_RESOURCE}"}}',
                ),
            ),
            rationale=(
                "The value is how many GPUs are missing: NVML's device count"
                + (" (or the node's `nvidia.com/gpu` capacity, whichever is larger)" if ksm else "")
                + " minus the GPUs the poller read in its last pass. A lost GPU also fires GPUErrorsDetected "
                "(critical) for that GPU; this alert stays while it is gone."
            ),
        ),
        AlertRule(
            name=COLLECTION_FAILING,
            group=GROUP,
            severity=Severity.WARNING,
            expr=(
                f"sum {by(('node',))} "
                f'(rate({catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name}{{reason=~"query|event"}}[5m])) > 0'
            ),
            for_seconds=600,
            summary="A GPU poller's NVML calls have kept failing for 10 minutes.",
            description=(
                f'The GPU poller on {_NODE} fails {{{{ printf "%.2f" $value }}}} NVML queries or XID event '
                "waits per second, and has for 10m: some GPU readings are missing."
            ),
            impact="GPU readings of the node are partial: alerts that read the missing fields cannot fire there",
            action=(
                "Read the poller's log on the node: each failing field is logged once with its NVML error",
                "Check the driver version against the poller's supported drivers and the node's kernel log",
                "Restart the poller pod; if the failures persist, drain the node and reset its GPUs",
            ),
            locating_labels=("node",),
            queries=(
                RunbookQuery(
                    "Failures by reason on this node",
                    f"rate({catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL.name}{_ONE_NODE}[5m])",
                ),
                RunbookQuery("Driver versions", f"{catalog.GPU_DRIVER_INFO.name}{_ONE_NODE}"),
            ),
            rationale=(
                "Counts `query` and `event` failures only: `init` failures are NVML down (NVMLDown) and "
                "`gpu_lost` ones a lost GPU (GPUErrorsDetected, GPUsNotAnswering)."
            ),
        ),
        AlertRule(
            name="GPUPollerCollectionSlow",
            group=GROUP,
            severity=Severity.WARNING,
            expr=f"max {by(('node',))} ({catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name} > {slow_pass.promql})",
            for_seconds=DOWN_FOR_SECONDS,
            summary=f"A GPU poller's NVML pass has taken longer than {slow_pass.text} for 5 minutes.",
            description=(
                f"The GPU poller on {_NODE} needs {{{{ $value | humanizeDuration }}}} for one NVML pass, more than "
                f"{slow_pass.short}, for 5m: scrapes wait for it and may time out."
            ),
            impact="Scrapes of the node's poller slow down and may time out, leaving gaps in its GPU series",
            action=(
                "Check the node's load and the poller's CPU throttling (its CPU limit)",
                "Check for a GPU that answers slowly (the log names failing fields; a GPU being reset)",
                "Raise the poller's minimum interval between passes if scrapes are frequent",
            ),
            locating_labels=("node",),
            queries=(
                RunbookQuery(
                    "Pass duration on this node over the last hour",
                    f"{catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS.name}{_ONE_NODE}[1h]",
                ),
                RunbookQuery(
                    "Scrape duration of the node's poller",
                    f'{catalog.SCRAPE_DURATION_SECONDS.name}{{service="{poller}"}}',
                ),
            ),
        ),
        AlertRule(
            name="RuleGroupEvaluationFailures",
            group=GROUP,
            severity=Severity.HIGH,
            expr=(
                f"sum {by(('instance', 'rule_group'))} "
                f"(increase({catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL.name}{{{groups}}}[{failure_window}]))"
                " > 0"
            ),
            for_seconds=600,
            summary="One of the platform's rule groups has kept failing evaluations for 10 minutes.",
            description=(
                "Rule group {{ $labels.rule_group }} on Prometheus {{ $labels.instance }} failed "
                f'{{{{ printf "%.0f" $value }}}} evaluations in the last {failure_window}, and has for 10m: '
                "alerts and recorded series of that group are missing."
            ),
            impact="The group's alerts cannot fire and its recorded series have gaps: part of the platform is blind",
            action=(
                "Read the failing rule and its error on the Prometheus /rules page (or `/api/v1/rules`)",
                "Check for a query timeout or sample limit (`query.timeout`, `query.max-samples`) and the "
                "Prometheus log",
                'Check for duplicate series after a relabelling change ("many-to-many matching" errors)',
            ),
            locating_labels=("instance", "rule_group"),
            queries=(
                RunbookQuery(
                    "Failures per project group in the last hour",
                    f"increase({catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL.name}{{{groups}}}[1h]) > 0",
                ),
                RunbookQuery(
                    "How long the failing group's evaluations take (a timeout shows as a long one)",
                    f'{catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name}{{rule_group="<rule_group>"}}[1h]',
                ),
            ),
            rationale="Reads Prometheus' own metrics: the Prometheus that evaluates the rules must scrape itself.",
        ),
        AlertRule(
            name="RuleGroupSlow",
            group=GROUP,
            severity=Severity.WARNING,
            expr=(
                f"max {by(('instance', 'rule_group'))} "
                f"({catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name}{{{groups}}})\n"
                f"> {slow_group.promql} *\n"
                f"max {by(('instance', 'rule_group'))} "
                f"({catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS.name}{{{groups}}})"
            ),
            for_seconds=600,
            summary=(
                f"One of the platform's rule groups has taken more than {slow_group.text} of its interval for "
                "10 minutes."
            ),
            description=(
                "Rule group {{ $labels.rule_group }} on Prometheus {{ $labels.instance }} takes "
                "{{ $value | humanizeDuration }} an evaluation, more than "
                f"{slow_group.short} of its interval, for 10m: the fleet "
                "is outgrowing this Prometheus."
            ),
            impact=(
                "Evaluations start late or are skipped once a group takes its whole interval: alerts fire late "
                "and recorded series get gaps"
            ),
            action=(
                "Find the slow group's costly rules on the Prometheus /rules page (evaluation time per rule)",
                "Check the Prometheus' CPU and memory headroom and the number of series it holds",
                "Shard the scrape load or give Prometheus more CPU before the group reaches its interval",
            ),
            locating_labels=("instance", "rule_group"),
            queries=(
                RunbookQuery(
                    "Duration as a share of the interval, every project group",
                    f"max by (instance, rule_group) ({catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name}"
                    f"{{{groups}}}) / max by (instance, rule_group) "
                    f"({catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS.name}{{{groups}}})",
                ),
                RunbookQuery(
                    "This group's duration over the last day (a steady climb follows the fleet's growth)",
                    f'{catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name}{{rule_group="<rule_group>"}}[1d]',
                ),
            ),
            rationale=(
                f"{slow_group.short} of the interval is the early warning: a group that takes its whole "
                "interval misses evaluations. Reads Prometheus' own metrics: the Prometheus that evaluates the "
                "rules must scrape itself."
            ),
        ),
        AlertRule(
            name=WATCHDOG,
            group=GROUP,
            severity=Severity.INFO,
            expr="vector(1)",
            for_seconds=0,
            summary="Always firing: the heartbeat of the alerting pipeline.",
            description=(
                "Always firing. Alertmanager sends it, and only it, to the heartbeat receiver every minute; the "
                "dead man's switch behind that receiver pages when the heartbeat stops."
            ),
            impact=(
                "None while it fires. When the heartbeat stops, Prometheus, Alertmanager or the path between "
                "them is dead and no alert reaches anyone"
            ),
            action=(
                "If the dead man's switch paged: check that Prometheus runs and evaluates its rules (its "
                "/rules page shows this group's last evaluation)",
                "Check that Alertmanager runs and that Prometheus reaches it (`prometheus_notifications_errors_total`, "
                "Alertmanager's /#/alerts shows Watchdog)",
                "Check the heartbeat receiver's URL (stack secret `alertHeartbeatUrl`) and Alertmanager's "
                "notification errors (`alertmanager_notifications_failed_total`)",
            ),
            locating_labels=(),
            queries=(
                RunbookQuery("Is Watchdog firing in Prometheus?", 'ALERTS{alertname="Watchdog"}'),
                RunbookQuery(
                    "Does Prometheus still evaluate this group? (its last evaluation's duration)",
                    f'{catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS.name}{{rule_group=~".*;{GROUP}"}}',
                ),
            ),
            rationale=(
                "Never silence it: routed only to the heartbeat receiver (`alertHeartbeatUrl`), repeated every "
                "minute, so the external switch sees a steady beat."
            ),
        ),
    )
