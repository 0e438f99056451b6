"""Firing and silent cases of the monitoring-health alerts (default config: scrape and evaluation
every 15 s, so sample i of a series is at 15*i seconds), and the lost-at-first-pass GPU through
GPUErrorsDetected.

`KSM_CASES` run with kube-state-metrics present (their own promtool suite). A poller target that
fails its scrapes has its series marked stale by Prometheus: `stale` in the input is that marker.
Thresholds and `for` durations are spelled out here on purpose (5 m, 10 m, 1 s, half the interval)
so a changed value in the rules fails these cases.
"""

from __future__ import annotations

from collections.abc import Mapping

from foxhunt_trainer.contract import catalog
from observability.promql import duration
from observability.thresholds import DEFAULT_THRESHOLDS, Thresholds
from tests.rules.promtool_harness import Case, Check, Firing, counter, gpu_labels, join, poller_target, series, values

NODE = "gpu-node-1"
TARGET = poller_target()
NODE_LABELS = {"node": NODE}
DOWN_LABELS = {**TARGET, "node": NODE}  # a down target keeps its target labels and gets its node
PROMETHEUS = {"job": "prometheus", "instance": "localhost:9090"}
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.9:8080"}
RULES_FILE = "/etc/prometheus/rules/foxhunt-rules.yaml"


def t(seconds: int) -> str:
    return duration(seconds)


def silent(*times: int) -> tuple[Check, ...]:
    return tuple(Check(t(x)) for x in times)


def fires(at: int, *firing: Firing) -> Check:
    return Check(t(at), tuple(firing))


def stale_after(value: float, samples: int, rest: int) -> str:
    """A target's series: `samples` scrapes of `value`, then the stale marker of a failed scrape."""
    return join([value] * samples) + " stale" + " _" * (rest - 1)


def _poller(metric: catalog.Metric, values_text: str, labels: Mapping[str, str] | None = None) -> dict[str, str]:
    return {series(metric, {**TARGET, "node": NODE, **(labels or {})}): values_text}


def _up(values_text: str, target: Mapping[str, str] = TARGET) -> dict[str, str]:
    return {series(catalog.UP, target): values_text}


def _capacity(node: str, gpus: int, samples: int = 60) -> dict[str, str]:
    labels = {**KSM, "node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
    return {series(catalog.KUBE_NODE_STATUS_CAPACITY, labels): values((gpus, samples))}


def _group(name: str) -> dict[str, str]:
    return {**PROMETHEUS, "rule_group": f"{RULES_FILE};{name}"}


def _located(name: str) -> dict[str, str]:
    """The labels a rule-group alert keeps: which Prometheus, which group."""
    return {"instance": PROMETHEUS["instance"], "rule_group": f"{RULES_FILE};{name}"}


# Up at 0..135 s, failing from 150 s: pending at 150 s, firing 5 m later at 450 s.
_TARGET_FAILS_AT_150S = {
    **_up(values((1, 10), (0, 40))),
    **_poller(catalog.GPU_POLLER_NVML_UP, stale_after(1, 10, 40)),
}

HEALTH_CASES: tuple[Case, ...] = (
    # --- GPUPollerDown ---------------------------------------------------------------------------
    Case(
        "GPUPollerDown",
        "a poller target failing its scrapes for 5m fires, on the node its own series named",
        _TARGET_FAILS_AT_150S,
        (*silent(435), fires(450, Firing(DOWN_LABELS)), fires(600, Firing(DOWN_LABELS))),
    ),
    Case(
        "GPUPollerDown",
        "a poller that never answered fires without a node",
        _up(values((0, 40))),
        (*silent(285), fires(300, Firing(TARGET))),
    ),
    Case(
        "GPUPollerDown",
        "down for 4m45s then back stays silent; other services' targets are not pollers",
        {
            **_up(values((0, 20), (1, 30))),
            **_up(values((0, 50)), {**TARGET, "service": "ml-training-service", "pod": "ml-training-service-6c4a"}),
        },
        silent(285, 300, 600),
    ),
    # --- NVMLDown --------------------------------------------------------------------------------
    Case(
        "NVMLDown",
        "NVML down for 5m fires for the node",
        _poller(catalog.GPU_POLLER_NVML_UP, values((1, 4), (0, 30))),
        (*silent(345), fires(360, Firing(NODE_LABELS, 0))),
    ),
    Case(
        "NVMLDown",
        "NVML down for 4m45s then back stays silent",
        _poller(catalog.GPU_POLLER_NVML_UP, values((0, 20), (1, 20))),
        silent(285, 300, 450),
    ),
    # --- GPUsNotAnswering ------------------------------------------------------------------------
    Case(
        "GPUsNotAnswering",
        "one of three enumerated GPUs not answering for 5m fires with the count",
        {
            **_poller(catalog.GPU_POLLER_DEVICES_ENUMERATED, values((3, 40))),
            **_poller(catalog.GPU_POLLER_DEVICES, values((3, 4), (2, 36))),
        },
        (*silent(345), fires(360, Firing(NODE_LABELS, 1))),
    ),
    Case(
        "GPUsNotAnswering",
        "every enumerated GPU answering, or NVML down (nothing enumerated), stays silent",
        {
            **_poller(catalog.GPU_POLLER_DEVICES_ENUMERATED, values((8, 40))),
            **_poller(catalog.GPU_POLLER_DEVICES, values((8, 40))),
            series(catalog.GPU_POLLER_DEVICES_ENUMERATED, {**TARGET, "node": "gpu-node-2"}): values((0, 40)),
            series(catalog.GPU_POLLER_DEVICES, {**TARGET, "node": "gpu-node-2"}): values((0, 40)),
        },
        silent(300, 450),
    ),
    # --- GPUPollerCollectionFailing --------------------------------------------------------------
    Case(
        "GPUPollerCollectionFailing",
        "query failures every scrape for 10m fire",
        _poller(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, join(counter(0, 1, 60)), {"reason": "query"}),
        (*silent(600), fires(615, Firing(NODE_LABELS, 1 / 15))),
    ),
    Case(
        "GPUPollerCollectionFailing",
        "init and gpu_lost failures (NVML down, a lost GPU: their own alerts) and one query failure stay silent",
        {
            **_poller(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, join(counter(0, 1, 60)), {"reason": "init"}),
            **_poller(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, join(counter(0, 1, 60)), {"reason": "gpu_lost"}),
            **_poller(catalog.GPU_POLLER_COLLECTION_FAILURES_TOTAL, values((0, 10), (1, 50)), {"reason": "query"}),
        },
        silent(300, 615, 800),
    ),
    # --- RuleGroupEvaluationFailures -------------------------------------------------------------
    Case(
        "RuleGroupEvaluationFailures",
        "a project group failing every evaluation from 60s fires 10m later",
        {
            series(catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL, _group("ml_gpu_resources")): join(
                [0.0] * 4, counter(1, 1, 60)
            )
        },
        (*silent(645), fires(660, Firing(_located("ml_gpu_resources"), 20))),
    ),
    Case(
        "RuleGroupEvaluationFailures",
        "another project's failing group and a project group without failures stay silent",
        {
            series(catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL, _group("kubernetes-apps")): join(
                counter(0, 1, 60)
            ),
            series(catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL, _group("ml_service.recording")): values((0, 60)),
            # A look-alike name: the dot in `ml_service.recording` is not a wildcard.
            series(catalog.PROMETHEUS_RULE_EVALUATION_FAILURES_TOTAL, _group("ml_serviceXrecording")): join(
                counter(0, 1, 60)
            ),
        },
        silent(675, 800),
    ),
    # --- Watchdog --------------------------------------------------------------------------------
    Case(
        "Watchdog",
        "always firing, with no input at all",
        {},
        (fires(0, Firing({})), fires(3600, Firing({}))),
    ),
    # --- GPUErrorsDetected: a GPU lost before the poller ever identified it ------------------------
    Case(
        "GPUErrorsDetected",
        "a GPU lost from the poller's first pass fires under its index (no uuid, no name)",
        {
            **_poller(
                catalog.GPU_ERRORS_TOTAL, values((1, 60)), {"gpu_id": "1", "error_type": "gpu_lost"}
            ),  # uuid and gpu_name empty: Prometheus drops them
            **{
                series(catalog.GPU_ERRORS_TOTAL, {**TARGET, **gpu_labels("0"), "error_type": "gpu_lost"}): values(
                    (0, 60)
                )
            },
        },
        (
            fires(0, Firing({"node": NODE, "gpu_id": "1"})),
            fires(585, Firing({"node": NODE, "gpu_id": "1"})),
            *silent(615),  # one loss: resolves 10m after it first showed
        ),
    ),
)

KSM_CASES: tuple[Case, ...] = (
    Case(
        "GPUPollerDown",
        "with kube-state-metrics: a GPU node with no poller at all fires; CPU nodes and watched nodes do not",
        {
            **_capacity("gpu-node-2", 8),  # no poller was ever scheduled here
            **_capacity(NODE, 8),
            **_capacity("cpu-node-1", 0),
            **_poller(catalog.GPU_POLLER_NVML_UP, values((1, 60))),
            **_up(values((1, 60))),
        },
        (*silent(285), fires(300, Firing({"node": "gpu-node-2"}))),
    ),
    Case(
        "GPUPollerDown",
        "with kube-state-metrics: a failing target is one alert with its pod, not a second one for its node",
        {**_TARGET_FAILS_AT_150S, **_capacity(NODE, 8)},
        (*silent(435), fires(450, Firing(DOWN_LABELS))),
    ),
    Case(
        "GPUsNotAnswering",
        "with kube-state-metrics: a GPU NVML does not even enumerate fires against the capacity",
        {
            **_capacity(NODE, 8),
            **_poller(catalog.GPU_POLLER_DEVICES_ENUMERATED, values((7, 40))),
            **_poller(catalog.GPU_POLLER_DEVICES, values((7, 40))),
        },
        (*silent(285), fires(300, Firing(NODE_LABELS, 1))),
    ),
    Case(
        "GPUsNotAnswering",
        "with kube-state-metrics: capacity, enumerated and answering equal stays silent",
        {
            **_capacity(NODE, 8),
            **_poller(catalog.GPU_POLLER_DEVICES_ENUMERATED, values((8, 40))),
            **_poller(catalog.GPU_POLLER_DEVICES, values((8, 40))),
        },
        silent(300, 450),
    ),
)


def threshold_health_cases(th: Thresholds = DEFAULT_THRESHOLDS) -> tuple[Case, ...]:
    """The health alerts that compare with a threshold, their edges taken from `th`."""
    slow_pass = th.gpu_poller_collection_slow_seconds.value
    share = th.rule_group_slow_interval_ratio.value
    return (
        Case(
            "GPUPollerCollectionSlow",
            f"passes of {1.5 * slow_pass:g}s for 5m fire",
            _poller(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, values((1.5 * slow_pass, 30))),
            (*silent(285), fires(300, Firing(NODE_LABELS, 1.5 * slow_pass))),
        ),
        Case(
            "GPUPollerCollectionSlow",
            f"passes of exactly {slow_pass:g}s stay silent",
            _poller(catalog.GPU_POLLER_COLLECTION_DURATION_SECONDS, values((slow_pass, 30))),
            silent(300, 435),
        ),
        Case(
            "RuleGroupSlow",
            f"a project group taking {15 * (share + 0.1):g}s of its 15s for 10m fires",
            {
                series(catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS, _group("ml_gpu_resources")): values(
                    (15 * (share + 0.1), 50)
                ),
                series(catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS, _group("ml_gpu_resources")): values((15, 50)),
            },
            (*silent(585), fires(600, Firing(_located("ml_gpu_resources"), 15 * (share + 0.1)))),
        ),
        Case(
            "RuleGroupSlow",
            f"exactly {share:.0%} of the interval, and another project's slow group, stay silent",
            {
                series(catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS, _group("ml_gpu_resources")): values(
                    (15 * share, 50)
                ),
                series(catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS, _group("ml_gpu_resources")): values((15, 50)),
                series(catalog.PROMETHEUS_RULE_GROUP_LAST_DURATION_SECONDS, _group("node-exporter")): values((14, 50)),
                series(catalog.PROMETHEUS_RULE_GROUP_INTERVAL_SECONDS, _group("node-exporter")): values((15, 50)),
            },
            silent(600, 700),
        ),
    )
