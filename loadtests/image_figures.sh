#!/bin/sh
# The container image's figures (docs/benchmarks/image.md): stand-in base build, cold image build,
# code-only rebuild, image size, and start -> /readyz of `dialscore serve` on the stand-ins.
#
#   loadtests/image_figures.sh [EXTRA PODMAN BUILD ARGUMENTS...]
#
# e.g. the CPU torch and mirror settings of the machine (docs/operating/kuberay.md, "The container
# image"). Root, Podman, runc and mmdebstrap needed; run from the repository root. The cold
# build is cold only when the stand-in base is new (its tag is the script's digest): remove that
# tag first (podman rmi localhost/dialscore-standin-base:<tag>) to measure it.
set -eu
export CONTAINERS_CONF="$PWD/deployments/image/containers.conf"
IMAGE=localhost/dialscore-figures:latest
NAME=dialscore-figures-$$
now() { date +%s.%N; }
took() { echo "$1 $(echo "$(now) - $2" | bc) s"; }

t=$(now); BASE=$(deployments/image/standin-base.sh | tail -1); took "base_build" "$t"
build() { podman build -q --format docker -t "$IMAGE" --build-arg "BASE_IMAGE=$BASE" "$@" . >/dev/null; }
t=$(now); build "$@"; took "image_build_cold_or_cached" "$t"
# A code-only change: one byte appended to a module, then taken back.
MODULE=services/dialscore_server/__init__.py
cp "$MODULE" "$MODULE.orig"; trap '[ ! -f "$MODULE.orig" ] || mv "$MODULE.orig" "$MODULE"; podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true' EXIT
echo >> "$MODULE"
t=$(now); build "$@"; took "image_rebuild_code_only" "$t"
mv "$MODULE.orig" "$MODULE"
echo "image_size $(podman image inspect --format '{{.Size}}' "$IMAGE") bytes"
echo "base_size $(podman image inspect --format '{{.Size}}' "$BASE") bytes"

MODELS=$(mktemp -d); HF_HUB_OFFLINE=1 .venv/bin/dialscore stand-ins build "$MODELS/stand-ins" >/dev/null
chmod -R a+rX "$MODELS"
t=$(now)
podman run -d --name "$NAME" -p 127.0.0.1:18799:8000 --shm-size 512m \
    -v "$MODELS/stand-ins:/opt/dialscore/artifacts/stand-ins:ro" "$IMAGE" \
    dialscore serve --host 0.0.0.0 --port 8000 >/dev/null
until curl -sf http://127.0.0.1:18799/readyz >/dev/null; do sleep 0.5; done
took "start_to_ready" "$t"
t=$(now); podman stop -t 60 "$NAME" >/dev/null; took "stop_idle" "$t"
echo "exit_status $(podman inspect --format '{{.State.ExitCode}}' "$NAME")"
rm -rf "$MODELS"
