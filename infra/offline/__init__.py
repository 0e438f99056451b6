"""The offline tooling around the Pulumi program: nothing here is part of a deployment.

- `render`: `python -m infra.offline.render --stack S` runs the program under the mock engine
  (`mock_engine`) and writes `rendered/<stack>/`, after the offline checks (`checks`: Kubernetes
  schemas (`schema_check`, `schemas/`), the policies (`policy_context`), promtool);
- `result`, `artifacts`: the rendered result of a stack and the files written besides its objects;
- `review_diff`: `make diff`, the rendered output of a base ref against the working tree;
- `regenerate`: `make generate`, rewrites the committed generated files (runbooks, dashboards README).
"""
