#!/usr/bin/env bash
# An image equivalent to the Dockerfile's, for hosts that reach Debian and PyPI but no
# container registry (the Dockerfile's python:3.11-slim base cannot be pulled there):
# a minimal Debian 12 root filesystem from debootstrap, our wheel and torch installed into
# /opt/genesis-fp16 with buildah, the same user, environment, entrypoint and healthcheck,
# then the CLI run inside the image. Run as root from a checkout, after `make dist`:
#
#   deploy/image/build-from-debootstrap.sh [TORCH_WHEEL_OR_REQUIREMENT]
#
# Needs: apt-get install debootstrap buildah (podman too, to run it as a container).
# What this does not reproduce: the Dockerfile's build stage (the wheel comes from dist/).
set -euo pipefail
export BUILDAH_FORMAT=docker  # HEALTHCHECK exists only in the Docker image format
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
wheel=dist/genesis_fp16-${version}-py3-none-any.whl
torch=${1:-torch==2.13.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -f "$wheel" ] || { echo "no $wheel: run make dist first" >&2; exit 1; }

debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$work/rootfs" http://deb.debian.org/debian

ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
cp -a "$work/rootfs/." "$mnt/"
cp /etc/resolv.conf "$mnt/etc/resolv.conf"
# The build host's CA bundle, for hosts whose outbound TLS goes through an inspecting proxy.
cp /etc/ssl/certs/ca-certificates.crt "$mnt/tmp/host-ca.crt"
install -d "$mnt/tmp/wheels" && cp "$wheel" "$mnt/tmp/wheels/"
if [ -f "$torch" ]; then cp "$torch" "$mnt/tmp/wheels/" && torch=/tmp/wheels/$(basename "$torch"); fi
run() { buildah run --isolation chroot --network host --env PIP_CERT=/tmp/host-ca.crt "$ctr" -- "$@"; }
run python3 -m venv /opt/genesis-fp16
run /opt/genesis-fp16/bin/pip install --no-cache-dir "$torch" "/tmp/wheels/$(basename "$wheel")"
run /opt/genesis-fp16/bin/pip uninstall --yes pip
run sh -c 'groupadd --system --gid 10001 genesis \
  && useradd --system --uid 10001 --gid genesis --no-create-home \
     --home-dir /var/lib/genesis-fp16 --shell /usr/sbin/nologin genesis \
  && install -d -o 10001 -g 10001 -m 0750 /var/lib/genesis-fp16 /var/cache/genesis-fp16 \
  && rm -rf /tmp/wheels /tmp/host-ca.crt /var/lib/apt/lists/* /var/cache/apt/archives/*.deb'
buildah config --user 10001:10001 --workingdir /var/lib/genesis-fp16 \
  --env PATH=/opt/genesis-fp16/bin:/usr/local/bin:/usr/bin:/bin --env PYTHONUNBUFFERED=1 \
  --env PYTHONDONTWRITEBYTECODE=1 --env HOME=/var/lib/genesis-fp16 \
  --env XDG_CACHE_HOME=/var/cache/genesis-fp16 --env GENESIS_FP16_STATE_DIR=/var/lib/genesis-fp16 \
  --env GENESIS_FP16_METRICS_ADDR=0.0.0.0 --env GENESIS_FP16_METRICS_PORT=9464 --port 9464 \
  --entrypoint '["genesis-fp16"]' --cmd serve \
  --healthcheck 'CMD python3 -c "import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:9464/healthz\", timeout=4)"' \
  --healthcheck-interval 30s --healthcheck-timeout 5s --healthcheck-start-period 120s \
  --healthcheck-retries 3 "$ctr"
buildah umount "$ctr"
buildah commit "$ctr" "localhost/genesis-fp16:${version}"
buildah rm "$ctr"

# The CLI inside the image, as its own user. `podman run` is the usual way; in a sandbox
# without CAP_SYS_RESOURCE crun cannot set the container's RLIMIT_NPROC, and buildah's
# chroot isolation runs the image's filesystem, user and environment instead.
check=$(buildah from "localhost/genesis-fp16:${version}")
buildah run --isolation chroot "$check" -- genesis-fp16 --help
buildah run --isolation chroot "$check" -- genesis-fp16 train se_darwin --steps 3 --device cpu --json
buildah rm "$check"
