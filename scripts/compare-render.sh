#!/usr/bin/env bash
# Render every stack into a scratch directory and compare it, file by file, with a reference tree
# (e.g. a render of main): `scripts/compare-render.sh /tmp/render-main`. Exits non-zero on any
# difference. Make the reference with `scripts/compare-render.sh --save /tmp/render-main`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
save=false
if [[ ${1:-} == --save ]]; then save=true; shift; fi
reference=${1:?usage: scripts/compare-render.sh [--save] DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for stack in $("$PY" -c 'from infra.settings import available_stacks; print(*available_stacks())'); do
  "$PY" -m infra.offline.render --stack "$stack" --out "$out" >/dev/null
done
if $save; then
  rm -rf "$reference" && mkdir -p "$reference" && cp -r "$out"/. "$reference"/
  echo "saved $(find "$reference" -type f | wc -l) rendered files to $reference"
  exit 0
fi
diff -r "$reference" "$out"
echo "identical: $(find "$out" -type f | wc -l) rendered files of $(ls "$out" | wc -l) stacks match $reference"
