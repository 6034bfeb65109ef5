# The service image (CPU or GPU nodes). Built, started, probed and stopped by
# tests/deploy/test_image.py wherever Podman runs (it skips, saying why, where it cannot), and
# linted by hadolint (tests/deploy/test_dockerfile.py). docs/operating/kuberay.md says how to build it.
#
# The base: BASE_IMAGE, by default the Ray image KubeRay users run (it has Ray's own Python, a
# writable conda prefix and the user `ray`, uid 1000). Any base works that has `python` and `pip`
# on PATH writing to a Python 3.11 environment that uid 1000 owns: without a registry, build the
# stand-in from Debian's packages with deployments/image/standin-base.sh and pass
# --build-arg BASE_IMAGE=<the name it prints>.
#
# Layers, cheapest to rebuild last: the pinned dependencies (constraints.txt, the lock file CI
# uses too) are installed before any project code is copied, so a code change re-runs only the
# COPY + install steps at the end, never the torch install. .dockerignore keeps the build context
# to what these COPY steps name.
ARG BASE_IMAGE=rayproject/ray:2.60.0-py311-gpu
FROM ${BASE_IMAGE}

# Where pip looks besides PyPI, and the CA bundle it trusts (pip reads them from the
# environment; the build's only). Empty by default: torch is PyPI's CUDA build, what GPU nodes
# need. A CPU-only image takes the CPU build instead, e.g.
#   --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# or a folder of wheels mounted for the build only (Podman/Buildah):
#   --volume /opt/wheels:/opt/wheels:ro --build-arg PIP_FIND_LINKS=/opt/wheels
# PIP_CERT: behind a TLS-intercepting proxy, its CA bundle, mounted the same way.
ARG PIP_FIND_LINKS=""
ARG PIP_EXTRA_INDEX_URL=""
ARG PIP_CERT=""

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/dialscore

# 1. Dependencies only: the runtime requirements of both distributions (pyproject.toml and
#    clients/pyproject.toml with its `reports` extra; a test keeps this list equal to them), each
#    at the version constraints.txt pins. The base runs as uid 1000 with a writable Python
#    environment: root is not needed. No pip cache is kept in the layer.
COPY --chown=1000:100 constraints.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check -c constraints.txt \
        "torch" "transformers" "accelerate" "safetensors" "numpy" "pydantic" "pyyaml" "ray[serve]" \
        "fastapi" "prometheus-client" "httpx" "matplotlib" "tqdm"

# 2. The project: the client distribution first (the server depends on it), then the server,
#    built in a copy under /tmp (setuptools writes build/ and *.egg-info beside the sources) and
#    installed (not editable): the sources are then deleted, only deployments/ stays (the Serve
#    configs, for CMD). --no-deps: every dependency is already installed, at the pinned version.
COPY --chown=1000:100 clients /tmp/src/clients
COPY --chown=1000:100 pyproject.toml README.md /tmp/src/
COPY --chown=1000:100 services /tmp/src/services
COPY --chown=1000:100 deployments /tmp/src/deployments
WORKDIR /tmp/src
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps ./clients . \
    && mkdir -p /opt/dialscore/deployments && cp -r deployments/*.yaml deployments/kuberay /opt/dialscore/deployments/ \
    && rm -rf /tmp/src \
    && python -c "import dialscore, dialscore_server.gateway.build"
WORKDIR /opt/dialscore

# A numeric user: Kubernetes' runAsNonRoot can verify it (a name cannot be checked).
USER 1000
# The model cache: the shared volume the RayService mounts (deployments/kuberay/). Header
# deadlines and connection caps are the ingress's in front of Serve (deployments/kuberay/
# front-proxy.yaml), not this image's.
ENV HF_HOME=/models/hf
EXPOSE 8000 8080
CMD ["serve", "run", "deployments/cluster.yaml"]
