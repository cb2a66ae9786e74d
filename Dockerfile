# Project image for every Mooring pod on Kubernetes: Ray head/workers, the MLflow server
# and the job driver. Build and push (the tag is the one the k8s/ manifests use):
#   docker build -t ghcr.io/mooring-fl/mooring:0.1.0 .
#   docker push ghcr.io/mooring-fl/mooring:0.1.0
# Python and Ray are the lock's (.python-version, requirements.lock): every node of a Ray cluster must run the
# driver's Ray and Python. tests/test_k8s_manifests.py checks that they agree with the lock and with
# spec.rayVersion in k8s/raycluster.yaml.
FROM python:3.11-slim

ARG RAY_VERSION=2.60.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# wget: KubeRay's default liveness/readiness probes run `wget ... | grep success` inside
# the Ray containers. (bash, which KubeRay uses to run `ray start`, is already in the base.)
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget \
    && rm -rf /var/lib/apt/lists/*

# Non-root user 1000, the uid the manifests' securityContexts run as.
RUN groupadd --gid 1000 mooring \
    && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash mooring

WORKDIR /app
COPY --chown=1000:1000 . /app

# The lock pins every package the tests passed on, the [cluster] extra's PostgreSQL driver (MLflow, Optuna)
# included. The PyPI torch wheels bundle CUDA, so the same image serves the CPU and the GPU worker groups.
RUN pip install -r requirements.lock \
    && pip install --no-deps ".[cluster]" \
    && python -c "import ray, sys; sys.exit(ray.__version__ != '${RAY_VERSION}')" \
    && rm -rf build ./*.egg-info

USER 1000:1000

CMD ["mooring", "--help"]
