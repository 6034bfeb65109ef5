# The service image (CPU or GPU nodes). No container engine runs on the development machine or in
# CI, so this file is linted (hadolint, tests/deploy/test_dockerfile.py) and read, never built there.
#
# Layers, cheapest to rebuild last: the pinned dependencies (constraints.txt, the lock file CI
# uses too) are installed before any project code is copied, so a code change re-runs only the
# two COPY + install steps at the end, never the torch install.
FROM rayproject/ray:2.60.0-py311-gpu

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/dialscore

# 1. Dependencies only: the runtime requirements of both distributions (pyproject.toml and
#    clients/pyproject.toml with its `reports` extra; a test keeps this list equal to them), each
#    at the version constraints.txt pins. The base image runs as `ray` (uid 1000) with a
#    writable conda prefix: root is not needed. torch: PyPI's CUDA build at the pinned version.
COPY --chown=1000:100 constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt \
        "torch" "transformers" "accelerate" "safetensors" "numpy" "pydantic" "pyyaml" "ray[serve]" \
        "fastapi" "prometheus-client" "httpx" "matplotlib" "tqdm"

# 2. The project: the client distribution first (the server depends on it), then the server.
#    --no-deps: every dependency is already installed, at the pinned version.
COPY --chown=1000:100 clients ./clients
COPY --chown=1000:100 pyproject.toml README.md ./
COPY --chown=1000:100 services ./services
COPY --chown=1000:100 deployments ./deployments
RUN pip install --no-cache-dir --no-deps ./clients . \
    && python -c "import dialscore, dialscore_server.gateway.build"

# A numeric user: Kubernetes' runAsNonRoot can verify it (a name cannot be checked).
USER 1000
# The model cache: the shared volume the RayService mounts (deployments/kuberay/). Header
# deadlines and connection caps are the ingress's in front of Serve (deployments/kuberay/
# front-proxy.yaml), not this image's.
ENV HF_HOME=/models/hf
EXPOSE 8000 8080
CMD ["serve", "run", "deployments/cluster.yaml"]
