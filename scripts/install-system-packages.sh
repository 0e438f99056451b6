#!/usr/bin/env bash
# Install the Debian packages the tests need, if any is missing: Prometheus 2.42 (server and
# promtool), Alertmanager (amtool), buildah and debootstrap (offline image build), gcc (fake NVML
# library), make. Non-interactive, and no package's service is started. Needs root to install;
# prints what is missing and how to install it otherwise.
set -euo pipefail

packages=(prometheus prometheus-alertmanager buildah debootstrap gcc libc6-dev make python3-venv ca-certificates)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
