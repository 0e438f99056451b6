"""Builds `promtool test rules` files from Python case tables and runs them in one promtool call.

A case is input series plus checks at given times; a check lists the alerts expected to be firing
(empty: the alert must be silent). Expected labels are the alert's locating labels plus
`severity`; expected annotations are the rule's own templates rendered here for those labels and
the value the case predicts, so promtool compares every annotation, `$value` included.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from foxhunt_trainer.contract.catalog import Metric
from observability.config import ObservabilityConfig
from observability.promql import identifiers
from observability.rules import efficiency, goodput, rule_groups
from observability.rules.render import dump_groups

# ------------------------------------------------------------------------------------------------
# Input series
# ------------------------------------------------------------------------------------------------


def series(name: str | Metric, labels: Mapping[str, str]) -> str:
    metric = name.name if isinstance(name, Metric) else name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"


def values(*runs: tuple[float | None, int]) -> str:
    """Explicit samples: runs of (value, count); None is a missing sample (`_`)."""
    out: list[str] = []
    for value, count in runs:
        out += ["_" if value is None else _num(value)] * count
    return " ".join(out)


def counter(start: float, step: float, count: int) -> list[float]:
    return [start + step * i for i in range(count)]


def join(*parts: Sequence[float | None]) -> str:
    return " ".join("_" if v is None else _num(v) for part in parts for v in part)


def _num(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def histogram(
    metric: Metric, labels: Mapping[str, str], per_sample: Mapping[float, int], samples: int, flat: int = 0
) -> dict[str, str]:
    """Bucket and count series of a histogram: `per_sample` observations per scrape in the bucket
    ending at each given bound, after `flat` scrapes without traffic."""
    unknown = set(per_sample) - set(metric.buckets)
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not bucket bounds of {metric.name}")
    out: dict[str, str] = {}
    for le in (*metric.buckets, math.inf):
        step = sum(n for upper, n in per_sample.items() if upper <= le)
        le_text = "+Inf" if le == math.inf else _num(le)
        out[series(metric.bucket, {**labels, "le": le_text})] = join([0.0] * flat, counter(0, step, samples))
    total = sum(per_sample.values())
    out[series(metric.count, labels)] = join([0.0] * flat, counter(0, total, samples))
    return out


def bucket_quantile(q: float, lower: float, upper: float) -> float:
    """histogram_quantile's result when every observation is in the bucket (lower, upper], computed
    the way Prometheus does (so the float matches promtool's exactly)."""
    return lower + (upper - lower) * q


def _buckets(metric: Metric) -> list[tuple[float, float]]:
    bounds = list(metric.buckets)
    return list(zip([0.0, *bounds[:-1]], bounds, strict=True))


def bucket_above(metric: Metric, threshold: float) -> tuple[float, float]:
    """The first bucket (lower, upper] whose every quantile is above `threshold` (lower >= it)."""
    found = next((b for b in _buckets(metric) if b[0] >= threshold), None)
    if found is None:
        raise ValueError(f"{metric.name} has no bucket above {threshold:g}: buckets {metric.buckets}")
    return found


def bucket_below(metric: Metric, threshold: float) -> tuple[float, float]:
    """The last bucket (lower, upper] whose every quantile is below `threshold` (upper <= it)."""
    found = [b for b in _buckets(metric) if b[1] <= threshold]
    if not found:
        raise ValueError(f"{metric.name} has no bucket below {threshold:g}: buckets {metric.buckets}")
    return found[-1]


def histogram_in_bucket(
    metric: Metric, labels: Mapping[str, str], upper: float, per_sample: int, samples: int
) -> dict[str, str]:
    """A histogram whose observations all fall in the bucket ending at `upper`."""
    return histogram(metric, labels, {upper: per_sample}, samples)


# ------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Firing:
    """One alert expected to be firing: its labels (without severity) and its `$value`."""

    labels: Mapping[str, str]
    value: float | None = None
    # What the description's `{{ range ... | query ... }}...{{ end }}` block renders to (the job's
    # GPUs by node), for alerts whose description runs a query.
    query_output: str | None = None


@dataclass(frozen=True)
class Check:
    at: str
    firing: tuple[Firing, ...] = ()


@dataclass(frozen=True)
class Case:
    alert: str
    name: str
    input: Mapping[str, str]
    checks: tuple[Check, ...]
    interval: str | None = None  # spacing of the input samples; default: the scrape interval

    @property
    def fires(self) -> bool:
        return any(check.firing for check in self.checks)

    @property
    def stays_silent(self) -> bool:
        return any(not check.firing for check in self.checks)


Samples = tuple[tuple[Mapping[str, str], float], ...]


@dataclass(frozen=True)
class RecordCase:
    """A recording rule evaluated at one time: expected samples as (labels, value).

    `also`: more records checked on the same input at the same time (one promtool group).
    `round_to`: compare values rounded to this step (a power of two, so the rounding itself is
    exact) where a rate's extrapolation leaves the last bit of an otherwise exact value to chance."""

    record: str
    name: str
    input: Mapping[str, str]
    at: str
    samples: Samples
    interval: str | None = None
    also: tuple[tuple[str, Samples], ...] = ()
    round_to: float | None = None

    @property
    def checks(self) -> tuple[tuple[str, Samples], ...]:
        return ((self.record, self.samples), *self.also)

    @property
    def records(self) -> tuple[str, ...]:
        return tuple(record for record, _ in self.checks)


def rounded(value: float, step: float) -> float:
    """PromQL's `round(value, step)`, computed as Prometheus computes it."""
    inverse = 1.0 / step
    return math.floor(value * inverse + 0.5) / inverse


# ------------------------------------------------------------------------------------------------
# Go template subset used by the rules' annotations (Prometheus' template functions)
# ------------------------------------------------------------------------------------------------

_QUERY_RANGE = re.compile(r"\{\{ range printf .*? \| query .*?\}\}.*?\{\{ end \}\}", re.DOTALL)
_IF_LABEL = re.compile(r"\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ else \}\}(.*?)\{\{ end \}\}", re.DOTALL)
_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PRINTF = re.compile(r'printf "(%\.\d+f)" \$value')


def _go_g4(value: float) -> str:
    """Go's fmt `%.4g` for the finite values the tests use."""
    return f"{value:.4g}"


def humanize_duration(value: float) -> str:
    """Prometheus' humanizeDuration."""
    if math.isnan(value) or math.isinf(value):
        return _go_g4(value)
    if value == 0:
        return f"{_go_g4(value)}s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        whole = int(abs(value))
        seconds, minutes = whole % 60, (whole // 60) % 60
        hours, days = (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_go_g4(abs(value))}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return f"{_go_g4(value)}{prefix}s"


def render_template(
    template: str, labels: Mapping[str, str], value: float | None, query_output: str | None = None
) -> str:
    if _QUERY_RANGE.search(template):
        if query_output is None:
            raise ValueError("the template runs a query: the case must give its query_output")
        template = _QUERY_RANGE.sub(lambda _: query_output, template)

    def conditional(match: re.Match[str]) -> str:
        return match.group(2) if labels.get(match.group(1)) else match.group(3)

    def action(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if expr.startswith("$labels."):
            name = expr.removeprefix("$labels.")
            if name not in labels:
                raise ValueError(f"the template uses label {name!r}, which the firing alert does not carry")
            return labels[name]
        if value is None:
            raise ValueError(f"the case gives no value but the template uses it: {{{{ {expr} }}}}")
        if expr == "$value | humanizePercentage":
            return f"{_go_g4(value * 100)}%"
        if expr == "$value | humanizeDuration":
            return humanize_duration(value)
        printf = _PRINTF.fullmatch(expr)
        if printf:
            return printf.group(1) % value
        raise ValueError(f"template action the test renderer does not know: {{{{ {expr} }}}}")

    return _ACTION.sub(action, _IF_LABEL.sub(conditional, template))


# ------------------------------------------------------------------------------------------------
# Test files
# ------------------------------------------------------------------------------------------------


def alert_rule_dicts(cfg: ObservabilityConfig) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups(cfg) for r in g["rules"] if "alert" in r}


def _duration_seconds(text: str) -> int:
    total = 0
    for number, unit in re.findall(r"(\d+)([dhms])", text):
        total += int(number) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit]
    return total


def _exp_alert(rule: Mapping[str, Any], firing: Firing) -> dict[str, Any]:
    labels = {**firing.labels, **rule.get("labels", {})}
    annotations = {
        k: render_template(v, labels, firing.value, firing.query_output) for k, v in rule["annotations"].items()
    }
    return {"exp_labels": labels, "exp_annotations": annotations}


def alert_test_group(case: Case, cfg: ObservabilityConfig, rules: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    rule = rules[case.alert]
    return {
        "name": f"{case.alert}: {case.name}",
        "interval": case.interval or f"{cfg.scrape_interval_seconds}s",
        "input_series": [{"series": s, "values": v} for s, v in case.input.items()],
        "alert_rule_test": [
            {
                "eval_time": check.at,
                "alertname": case.alert,
                "exp_alerts": [_exp_alert(rule, f) for f in check.firing],
            }
            for check in case.checks
        ],
    }


def _expr_test(record: str, samples: Samples, at: str, step: float | None) -> dict[str, Any]:
    if step is None:
        expected = [{"labels": series(record, labels), "value": value} for labels, value in samples]
        return {"expr": record, "eval_time": at, "exp_samples": expected}
    expected = [{"labels": series("", labels), "value": rounded(value, step)} for labels, value in samples]
    return {"expr": f"round({record}, {step!r})", "eval_time": at, "exp_samples": expected}


def record_group(case: RecordCase, cfg: ObservabilityConfig) -> dict[str, Any]:
    return {
        "name": f"{case.record}: {case.name}",
        "interval": case.interval or f"{cfg.scrape_interval_seconds}s",
        "input_series": [{"series": s, "values": v} for s, v in case.input.items()],
        "promql_expr_test": [_expr_test(record, samples, case.at, case.round_to) for record, samples in case.checks],
    }


def groups_needed(groups: list[dict[str, Any]], alerts: set[str], records: set[str]) -> list[dict[str, Any]]:
    """The rendered groups (unchanged, in order) that hold one of `alerts` or `records`, and every
    group that records a series they read, transitively: promtool evaluates every group of its
    rules file at every step of every test, and a group no case can observe only costs time."""
    recorded_in = {rule["record"]: group["name"] for group in groups for rule in group["rules"] if "record" in rule}
    reads = {
        group["name"]: {
            recorded_in[n] for rule in group["rules"] for n in identifiers(rule["expr"]) if n in recorded_in
        }
        for group in groups
    }
    needed = {
        group["name"]
        for group in groups
        if any(rule.get("alert") in alerts or rule.get("record") in records for rule in group["rules"])
    }
    frontier = set(needed)
    while frontier:
        frontier = set().union(*(reads[name] for name in frontier)) - needed
        needed |= frontier
    return [group for group in groups if group["name"] in needed]


@dataclass
class Suite:
    """One promtool test file: its own rules file, the groups of the rules rendered for `cfg` that
    its cases can observe (`groups_needed`), each group as rendered."""

    name: str
    cfg: ObservabilityConfig
    cases: list[Case] = field(default_factory=list)
    records: list[RecordCase] = field(default_factory=list)

    # Changes the rules file only (expectations still come from the real rules): used to prove
    # that the cases catch a broken threshold, `for`, expression or annotation.
    mutate: Callable[[list[dict[str, Any]]], None] | None = None

    def _rendered(self) -> list[dict[str, Any]]:
        groups = rule_groups(self.cfg)
        if self.mutate is not None:
            self.mutate(groups)
        return groups

    def parts(self) -> list[Suite]:
        """The same cases as suites whose cases need the same groups (`groups_needed`), in order.

        promtool evaluates every group of a test file's rules file at every step of each of its
        tests. One case needs two or three groups on average, while one rules file for the whole
        default suite holds the eleven groups any of its cases needs. Split, each case still runs
        against every group it can observe, each as rendered (and mutated), so it proves the same;
        the default suite's promtool run takes about a third of the time (221 s against 77 s on
        one core)."""
        groups = self._rendered()
        cases: dict[tuple[str, ...], tuple[list[Case], list[RecordCase]]] = {}

        def bucket(alerts: set[str], records: set[str]) -> tuple[list[Case], list[RecordCase]]:
            key = tuple(group["name"] for group in groups_needed(groups, alerts, records))
            return cases.setdefault(key, ([], []))

        for case in self.cases:
            bucket({case.alert}, set())[0].append(case)
        for record in self.records:
            bucket(set(), set(record.records))[1].append(record)
        return [
            Suite(f"{self.name}-{i}", self.cfg, alerts, records, self.mutate)
            for i, (alerts, records) in enumerate(cases.values())
        ]

    def write_parts(self, directory: Path) -> list[Path]:
        """The test files of `parts()`: run together, they prove what `write`'s one file does."""
        return [part.write(directory) for part in self.parts()]

    def write(self, directory: Path) -> Path:
        rules_path = directory / f"{self.name}.rules.yaml"
        groups = self._rendered()
        alerts, records = {c.alert for c in self.cases}, {r for c in self.records for r in c.records}
        groups = groups_needed(groups, alerts, records)
        rules_path.write_text(dump_groups(groups), encoding="utf-8")
        rules = alert_rule_dicts(self.cfg)
        document = {
            "rule_files": [rules_path.name],
            "evaluation_interval": f"{self.cfg.evaluation_interval_seconds}s",
            # promtool otherwise evaluates groups in random order at each timestamp, and an alert
            # reading a recorded series would see it one evaluation late at random.
            "group_eval_order": [group["name"] for group in groups],
            "tests": [alert_test_group(c, self.cfg, rules) for c in self.cases]
            + [record_group(r, self.cfg) for r in self.records],
        }
        test_path = directory / f"{self.name}.test.yaml"
        test_path.write_text(yaml.safe_dump(document, sort_keys=False, width=10_000), encoding="utf-8")
        return test_path


# Groups whose cases run in a suite of their own: no other group's alert reads them, so the other
# suites leave them out of their rules files (`groups_needed`) and evaluate faster.
OWN_SUITE_GROUPS: tuple[str, ...] = (goodput.GROUP, efficiency.GROUP)


def split_suites(
    name: str, cfg: ObservabilityConfig, cases: Sequence[Case], records: Sequence[RecordCase]
) -> tuple[Suite, Suite]:
    """The suite of `cases` and `records`, and the suite of those whose rules are in `OWN_SUITE_GROUPS`."""
    own = {
        rule.get("alert") or rule.get("record")
        for group in rule_groups(cfg)
        if group["name"] in OWN_SUITE_GROUPS
        for rule in group["rules"]
    }
    return (
        Suite(name, cfg, [c for c in cases if c.alert not in own], [r for r in records if r.record not in own]),
        Suite(f"{name}-goodput", cfg, [c for c in cases if c.alert in own], [r for r in records if r.record in own]),
    )


@dataclass(frozen=True)
class PromtoolResult:
    returncode: int
    output: str

    def failed_groups(self) -> set[str]:
        """Names of the test groups promtool reported as failing."""
        return set(re.findall(r"^\s*name: (.+),$", self.output, flags=re.MULTILINE))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        raise RuntimeError("promtool not found: install the Debian package `prometheus` (.ci/run does)")
    return path


def run_promtool_tests(test_files: Iterable[Path], cwd: Path) -> PromtoolResult:
    files = [str(p) for p in test_files]
    # A guard against a hung promtool, not a speed check: the whole batch of test files took over
    # 300 s on a slow 2-core machine with the rest of the suite running beside it.
    proc = subprocess.run(
        [promtool(), "test", "rules", *files], cwd=cwd, capture_output=True, text=True, timeout=1200, check=False
    )
    return PromtoolResult(proc.returncode, proc.stdout + proc.stderr)


def gpu_labels(gpu_id: str = "0", node: str = "gpu-node-1") -> dict[str, str]:
    return {"node": node, "gpu_id": gpu_id, "uuid": f"GPU-{node}-{gpu_id}", "gpu_name": "NVIDIA H100 80GB HBM3"}


def poller_target(node: str = "gpu-node-1", pod: str = "gpu-poller-abcde") -> dict[str, str]:
    """Scrape-target labels the poller's series carry (and GPU alerts must drop)."""
    return {"namespace": "monitoring", "pod": pod, "service": "gpu-poller", "instance": "10.0.0.7:9400", "job": "pods"}


def seconds(text: str) -> int:
    return _duration_seconds(text)
