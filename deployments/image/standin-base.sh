#!/bin/sh
# Build the stand-in base image: what the Dockerfile needs of rayproject/ray, from Debian's
# packages alone, for machines that cannot pull from a public registry (tests/deploy/test_image.py).
#
#   deployments/image/standin-base.sh [ENGINE]      ENGINE: podman (default) or docker
#
# Debian bookworm (Python 3.11, as the default base's -py311 tag), minimal: python3 with venv
# (its pip comes from ensurepip) and ca-certificates; a user `ray` with uid 1000 in group `users`
# (100), who owns a virtual environment at /home/ray/venv that is first on PATH, so `pip install`
# writes there without root, as it writes to the conda prefix of rayproject/ray. Needs root and
# mmdebstrap, and a Debian mirror (deb.debian.org).
#
# The image is tagged with a digest of this script: when the tag exists it is not built again.
# Prints the image's name on its last line.
set -eu
ENGINE=${1:-podman}
SELF=$(readlink -f "$0")
TAG=$(sha256sum "$SELF" | cut -c1-12)
IMAGE="localhost/dialscore-standin-base:$TAG"
if "$ENGINE" image exists "$IMAGE" 2>/dev/null \
        || { [ "$ENGINE" = docker ] && docker image inspect "$IMAGE" >/dev/null 2>&1; }; then
    echo "$IMAGE"
    exit 0
fi
command -v mmdebstrap >/dev/null || { echo "standin-base.sh: needs mmdebstrap (apt-get install mmdebstrap)" >&2; exit 1; }
mmdebstrap --variant=minbase --quiet \
    --include=python3,python3-venv,ca-certificates \
    --customize-hook='chroot "$1" useradd --uid 1000 --gid 100 --create-home --shell /bin/bash ray' \
    --customize-hook='chroot "$1" runuser -u ray -- python3 -m venv /home/ray/venv' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
    bookworm - http://deb.debian.org/debian \
  | "$ENGINE" import --quiet \
      --change 'ENV PATH=/home/ray/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' \
      --change 'USER 1000' \
      --change 'WORKDIR /home/ray' \
      - "$IMAGE" >/dev/null
echo "$IMAGE"
