#!/usr/bin/env bash
# Install what the tests need, if any is missing:
# - Debian packages: Prometheus 2.42 (server and promtool), Alertmanager (amtool), buildah and
#   debootstrap (offline image build), gcc (fake NVML library), make, chromium (foxhunt-report's
#   page loaded headless), and node with npm when no node is on PATH. Non-interactive, and no
#   package's service is started. Needs root to install; prints what is missing and how to install
#   it otherwise.
# - the npm packages of package.json (query grammars the tests parse queries with), into
#   node_modules/ of the repository, exact versions, no root needed.
set -euo pipefail
cd "$(dirname "$0")/.."

install_npm_packages() {
  # `npm ls` fails when a package of package.json is missing or at another version.
  npm ls --depth=0 >/dev/null 2>&1 && return 0
  echo "installing npm packages of package.json into node_modules/"
  npm install --no-package-lock --no-audit --no-fund --loglevel=error
}

packages=(prometheus prometheus-alertmanager buildah debootstrap gcc libc6-dev make python3-venv ca-certificates chromium)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  install_npm_packages
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  echo "install them as root: sudo $0   (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Never let a package's maintainer script start its service (prometheus, alertmanager).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
echo "installing Debian packages: ${missing[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
install_npm_packages
