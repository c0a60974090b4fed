# genesis-fp16 as a container image: the daemon (`genesis-fp16 serve`) by default, and the
# same image runs `genesis-fp16 train` in the multi-node Job and the Kubeflow TrainJob.
#
#   docker build -t ghcr.io/example/genesis-fp16:0.1.0 .                        # CPU torch
#   docker build --build-arg TORCH=cu128 -t ghcr.io/example/genesis-fp16:0.1.0-cu128 .
#   docker run --rm -p 9464:9464 -v genesis-state:/var/lib/genesis-fp16 \
#       ghcr.io/example/genesis-fp16:0.1.0
#
# TORCH names the PyTorch wheel index: cpu (small, no CUDA) or a CUDA build such as cu126
# or cu128, whose wheels bring their own CUDA libraries (the host needs only the driver and
# the NVIDIA container toolkit). TORCH_VERSION follows constraints.txt, and both installs
# use it: torch alone from that index (its dependencies are not all there at the pinned
# versions), then the wheel with everything else at the versions the tests ran with
# (tests/test_packaging.py installs the same way). The Kubernetes
# manifests that request a GPU (statefulset.yaml, the multi-node Job and TrainJob) run the
# cu128 tag; statefulset-cpu.yaml runs the CPU one (tests/deploy/test_dockerfile.py).
#
# Two stages: the first builds our wheel with the standard front end and installs it with
# torch into a venv; the final image gets that venv alone (no build front end, compiler,
# pip cache or sources) and runs as an unprivileged user whose uid the Kubernetes
# manifests name (runAsUser: 10001).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH=cpu
ARG TORCH_VERSION=2.13.0
WORKDIR /src
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir build==1.2.2.post1
COPY pyproject.toml MANIFEST.in README.md constraints.txt ./
COPY infrastructure ./infrastructure
COPY agents ./agents
COPY genesis_fp16 ./genesis_fp16
RUN /opt/build/bin/python -m build --wheel --outdir /dist . \
    && python -m venv /opt/genesis-fp16 \
    && /opt/genesis-fp16/bin/pip install --no-cache-dir --no-deps -c constraints.txt \
        --index-url "https://download.pytorch.org/whl/${TORCH}" "torch==${TORCH_VERSION}" \
    && /opt/genesis-fp16/bin/pip install --no-cache-dir -c constraints.txt \
        /dist/genesis_fp16-*.whl \
    && /opt/genesis-fp16/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
ARG TORCH=cpu
LABEL org.opencontainers.image.title="genesis-fp16" \
      org.opencontainers.image.description="Mixed-precision (FP16/BF16) training daemon for Genesis agents' world models" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.genesis-fp16.torch="${TORCH}"
RUN groupadd --system --gid 10001 genesis \
    && useradd --system --uid 10001 --gid genesis --no-create-home \
        --home-dir /var/lib/genesis-fp16 --shell /usr/sbin/nologin genesis \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/genesis-fp16 /var/cache/genesis-fp16
COPY --from=build /opt/genesis-fp16 /opt/genesis-fp16
# Start-up settings only: the reloadable ones belong in the mounted .env file
# (GENESIS_FP16_ENV_FILE), which the environment would otherwise shadow.
ENV PATH=/opt/genesis-fp16/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/genesis-fp16 \
    XDG_CACHE_HOME=/var/cache/genesis-fp16 \
    GENESIS_FP16_STATE_DIR=/var/lib/genesis-fp16 \
    GENESIS_FP16_METRICS_ADDR=0.0.0.0 \
    GENESIS_FP16_METRICS_PORT=9464
WORKDIR /var/lib/genesis-fp16
USER 10001:10001
EXPOSE 9464
# /healthz: the process answers and the scheduler's heartbeat is fresh (plain HTTP; with
# TLS on the metrics port, rely on the orchestrator's probes instead). No curl in a slim
# image, so Python asks.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('GENESIS_FP16_METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["genesis-fp16"]
CMD ["serve"]
