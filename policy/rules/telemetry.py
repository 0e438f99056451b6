"""Scrape annotations on every declared service, and OTLP traces from the training job to Tempo."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policy.manifests import (
    PodTemplate,
    as_int,
    containers,
    env_value,
    mapping,
    pod_templates,
    sequence,
    service_label,
    string,
)
from policy.vocabulary import DeclaredService, Enforcement, Finding, KubeObject, Policy, PolicyContext

SCRAPE = "prometheus.io/scrape"
PORT = "prometheus.io/port"
PATH = "prometheus.io/path"
OTEL_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRAINING_JOB_KINDS = ("CronJob", "Job", "PodTemplate")


def _ports(service: DeclaredService) -> str:
    return ", ".join(str(p) for p in sorted(service.ports)) or "none"


def check_scrape_annotations(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    misplaced = sorted(key for key in obj.annotations if str(key).startswith("prometheus.io/"))
    for template in pod_templates(obj):
        annotations = template.annotations
        if misplaced and not any(str(key).startswith("prometheus.io/") for key in annotations):
            yield Finding(
                "metadata.annotations",
                f"{', '.join(misplaced)} are on the {obj.kind}, where pod discovery never reads them",
                f"move them to {template.field('metadata.annotations')}",
            )
        if SCRAPE not in annotations and PORT not in annotations:
            continue
        yield from _annotated_template(obj, template, ctx)


def _annotated_template(obj: KubeObject, template: PodTemplate, ctx: PolicyContext) -> Iterator[Finding]:
    annotations = template.annotations
    where = template.field("metadata.annotations")
    scrape = annotations.get(SCRAPE)
    if scrape not in ("true", "false"):
        yield Finding(
            f"{where}.{SCRAPE}",
            f'{SCRAPE} is {scrape!r}; the scrape config keeps only pods whose value is the string "true"',
            f'set {SCRAPE}: "true" (quoted: annotation values are strings)',
        )
    if scrape == "false":
        return
    label = service_label(template, obj)
    service = ctx.service(label, obj.name)
    who = label or obj.name
    if service is None:
        declared = ", ".join(s.name for s in ctx.services or ()) or "none"
        yield Finding(
            where,
            f"pods of {who!r} are annotated for scraping, but the stack declares no such service "
            f"(declared: {declared})",
            "declare the service and its port in Pulumi.<stack>.yaml, or set the pod label app.kubernetes.io/name "
            "to the declared service name",
        )
        return
    port = as_int(annotations.get(PORT))
    if port is None:
        yield Finding(
            f"{where}.{PORT}",
            f"{PORT} is {annotations.get(PORT)!r}, not a port number",
            f'set {PORT}: "{min(service.ports, default=0)}" (a declared port of {service.name}, quoted)',
        )
    elif port not in service.ports:
        yield Finding(
            f"{where}.{PORT}",
            f"annotated port {port} is not a port the stack declares for {service.name} (declared: {_ports(service)})",
            f"annotate a declared port, or declare {port} for {service.name} in Pulumi.<stack>.yaml",
        )
    else:
        exposed = {
            number
            for container in containers(template, ("containers",))
            for item in sequence(container.spec.get("ports"))
            if (number := as_int(mapping(item).get("containerPort"))) is not None
        }
        if exposed and port not in exposed:
            yield Finding(
                f"{where}.{PORT}",
                f"annotated port {port} is not a containerPort of the pod (exposed: {sorted(exposed)})",
                f"expose containerPort {port} in the metrics container, or annotate the exposed port",
            )
    path = string(annotations.get(PATH))
    if service.path and (path or "/metrics") != service.path:
        yield Finding(
            f"{where}.{PATH}",
            f"{PATH} is {path!r} but {service.name} serves metrics on {service.path}",
            f"set {PATH}: {service.path}",
        )


def check_scrape_coverage(objects: Sequence[KubeObject], ctx: PolicyContext) -> Iterator[tuple[None, Finding]]:
    scraped: set[str] = set()
    for obj in objects:
        for template in pod_templates(obj):
            if template.annotations.get(SCRAPE) != "true":
                continue
            service = ctx.service(service_label(template, obj), obj.name)
            if service is not None:
                scraped.add(service.name)
    for service in ctx.services or ():
        if service.required and service.name not in scraped:
            yield (
                None,
                Finding(
                    f"services[{service.name}]",
                    f'declared service {service.name} has no pod template annotated {SCRAPE}: "true", so Prometheus '
                    "never scrapes it",
                    f'patch its Deployment\'s pod template with {SCRAPE}: "true", {PORT}: '
                    f'"{min(service.ports, default=0)}", {PATH}: {service.path or "/metrics"}',
                ),
            )


def _same_endpoint(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def check_otel_endpoint(obj: KubeObject, ctx: PolicyContext) -> Iterator[Finding]:
    tempo = ctx.tempo_otlp_endpoint or ""
    for template in pod_templates(obj):
        for container in containers(template):
            is_set, value = env_value(container, OTEL_ENDPOINT)
            if is_set and (value is None or not _same_endpoint(value, tempo)):
                shown = "set from valueFrom" if value is None else repr(value)
                yield Finding(
                    container.field(f"env[{OTEL_ENDPOINT}]"),
                    f"{OTEL_ENDPOINT} is {shown}, not this stack's Tempo ({tempo}), so spans go elsewhere or nowhere",
                    f"set value: {tempo} (from the stack's endpoints.tempoOtlpGrpc)",
                )


def check_training_job_otel(
    objects: Sequence[KubeObject], ctx: PolicyContext
) -> Iterator[tuple[KubeObject | None, Finding]]:
    name = ctx.training_job_name or ""
    tempo = ctx.tempo_otlp_endpoint or ""
    templates = [o for o in objects if o.kind in TRAINING_JOB_KINDS and o.name == name and not o.is_patch]
    if not templates:
        yield (
            None,
            Finding(
                f"trainingJob[{name}]",
                f"the stack has no training job template named {name!r} (CronJob, Job or PodTemplate)",
                "render the TrainingJobTemplate component, or fix trainingJob.name in Pulumi.<stack>.yaml",
            ),
        )
    for obj in templates:
        for template in pod_templates(obj):
            for container in containers(template, ("containers",)):
                is_set, value = env_value(container, OTEL_ENDPOINT)
                if not is_set:
                    yield (
                        obj,
                        Finding(
                            container.field("env"),
                            f"training container {container.name} has no {OTEL_ENDPOINT}, "
                            "so its spans never reach Tempo",
                            f"add env {{name: {OTEL_ENDPOINT}, value: {tempo}}}",
                        ),
                    )
                elif value is None or not _same_endpoint(value, tempo):
                    yield (
                        obj,
                        Finding(
                            container.field(f"env[{OTEL_ENDPOINT}]"),
                            f"{OTEL_ENDPOINT} is {value!r}, not this stack's Tempo ({tempo})",
                            f"set value: {tempo}",
                        ),
                    )


SCRAPE_ANNOTATIONS = Policy(
    id="scrape-annotations",
    description=(
        'Pod templates annotated for Prometheus scraping say prometheus.io/scrape "true", a port the stack '
        "declares for that service and its metrics path, on the pod template where discovery reads them."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation="Annotate the pod template with the service's declared port and path (Pulumi.<stack>.yaml services).",
    check=check_scrape_annotations,
    needs=("services",),
    tags=("observability",),
)

SCRAPE_COVERAGE = Policy(
    id="scrape-coverage",
    description="Every service the stack declares has a pod template annotated for scraping.",
    enforcement=Enforcement.MANDATORY,
    remediation="Patch each declared service's Deployment with the prometheus.io/* pod annotations.",
    stack_check=check_scrape_coverage,
    needs=("services",),
    tags=("observability",),
)

OTEL_ENDPOINT_POLICY = Policy(
    id="otel-endpoint",
    description=f"Every {OTEL_ENDPOINT} in the stack is a literal pointing at the stack's own Tempo.",
    enforcement=Enforcement.MANDATORY,
    remediation="Set the env value to the stack's endpoints.tempoOtlpGrpc.",
    check=check_otel_endpoint,
    needs=("tempo_otlp_endpoint",),
    tags=("observability", "tracing"),
)

TRAINING_JOB_OTEL = Policy(
    id="training-job-otel",
    description=(
        f"The training job template exists and every container in it sets {OTEL_ENDPOINT} to the stack's Tempo."
    ),
    enforcement=Enforcement.MANDATORY,
    remediation=f"Add env {OTEL_ENDPOINT} (value: endpoints.tempoOtlpGrpc) to the training job template's containers.",
    stack_check=check_training_job_otel,
    needs=("tempo_otlp_endpoint", "training_job_name"),
    tags=("observability", "tracing"),
)
