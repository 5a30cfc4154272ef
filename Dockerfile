# fault-agent container image.
#
# Build (from the repository root; needs a Docker/BuildKit or Podman engine, not available in the dev sandbox):
#   docker build -t fault-agent:0.1.0 .
#   docker run --rm fault-agent:0.1.0 settings --defaults     # smoke test: prints the default settings
# Then push it and point deploy/kustomization.yaml's `images:` entry at it (see deploy/README.md).
#
# For reproducible builds pin the base image by digest as well, e.g.
#   ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build stage: turn the project and its dependencies into wheels -----------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies first, so source changes do not invalidate this layer.
COPY pyproject.toml README.md ./
COPY agent/__init__.py agent/__init__.py
COPY testbed/__init__.py testbed/__init__.py
RUN pip wheel --wheel-dir /wheels .
COPY agent/ agent/
COPY testbed/ testbed/
RUN rm -f /wheels/fault_agent-*.whl && pip wheel --no-deps --wheel-dir /wheels .

# --- final stage: no compilers, no build tools, no source tree -----------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FAULT_AGENT_LOG__FORMAT=json
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels fault-agent \
    && groupadd --gid 10001 fault-agent \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fault-agent \
    && mkdir -p /var/lib/fault-agent/outbox \
    && chown 10001:10001 /var/lib/fault-agent/outbox
# Fault-level table, event schemas and the documented default settings.
COPY config/ /app/config/
WORKDIR /app
USER 10001:10001
EXPOSE 8080
VOLUME ["/var/lib/fault-agent/outbox"]
ENTRYPOINT ["fault-agent"]
CMD ["run"]
