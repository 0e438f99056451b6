"""Policy as code: one set of rules over Kubernetes manifests, enforced by pytest and by CrossGuard.

The rules (`policy.rules`) are pure functions over manifests (read-only `Mapping`s and
`Sequence`s, so they run unchanged on plain dicts and on the proxies the Pulumi analyzer passes).
What a rule needs to know about the stack (declared services and ports, the Tempo endpoint, ...)
comes in a `PolicyContext`. `policy.engine` runs them over a set of objects; `policy.pack` serves
them as a CrossGuard policy pack (`pulumi preview --policy-pack policy`). Nothing here imports
`infra`: policies read manifests, not the program's Python objects.
"""
