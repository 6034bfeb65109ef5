# The service image (CPU or GPU nodes). Not buildable on the development machine (no Docker
# engine there); kept minimal and checked by reading.
FROM rayproject/ray:2.60.0-py311-gpu

USER root
WORKDIR /opt/dialscore
COPY pyproject.toml README.md ./
COPY services ./services
COPY clients ./clients
COPY deployments ./deployments
# The base image ships a CUDA build of torch; pin it to the tested version without the CPU index.
RUN pip install --no-cache-dir "torch==2.13.0" && pip install --no-cache-dir ".[serve]" \
    # saved safetensors files can come out mode 0600: make the tree readable by the runtime user
    && chmod -R a+rX /opt/dialscore

# Run as the base image's unprivileged user, never root.
USER ray
ENV HF_HOME=/home/ray/.cache/huggingface \
    TOKENIZERS_PARALLELISM=false
EXPOSE 8000
CMD ["serve", "run", "deployments/cluster.yaml"]
