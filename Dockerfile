# fault-agent container image.
#
# Build (from the repository root):
#   make image                                   # Debian's buildah, no daemon (see testbed/image.py)
#   docker build -t fault-agent:0.1.0 .          # or podman/buildah bud: any engine with RUN --mount
#   docker run --rm fault-agent:0.1.0 settings --defaults     # smoke test: prints the default settings
# Then push it and point deploy/kustomization.yaml's `images:` entry at it (see deploy/README.md).
#
# PYTHON_IMAGE is any Debian-based image whose `python3` is CPython >= 3.11 with the venv module: the official
# python image (the default), or the local Debian bookworm base that `make image` makes from Debian packages
# (python3, python3-venv, ca-certificates) when no registry is reachable. Both stages use the same base, so the
# virtualenv built in the first one finds its interpreter at the same path in the second. Installing into a
# virtualenv also keeps pip off the system Python, which Debian's python3 refuses (PEP 668).
# The official base is pinned by digest (the multi-arch index of the tag's last push; a tag can be pushed again, a
# digest cannot): a pull gets exactly these bytes or fails. Check it, or move to a newer one, with
#   docker buildx imagetools inspect docker.io/library/python:3.11.11-slim-bookworm
# The local Debian base of `make image` (no registry reachable) has no digest to pin: its name carries a hash of
# its suite, packages and mmdebstrap options, and the tar made once is cached and reused (testbed/image.py).
ARG PYTHON_IMAGE=docker.io/library/python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

# --- build stage: the virtualenv with the pinned dependencies and the agent -----------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
RUN python3 -m venv /opt/fault-agent
# Dependencies first (pinned by constraints.txt, refreshed with `make lock`), so source changes do not
# invalidate this layer in engines that cache layers. A package index whose TLS is re-signed by a local CA is
# trusted through the optional build secret `pip-ca` (a CA bundle file: `--secret id=pip-ca,src=<bundle>`); a
# secret is mounted for this RUN only and is in no layer of either stage.
COPY constraints.txt pyproject.toml README.md ./
COPY agent/__init__.py agent/__init__.py
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/fault-agent/bin/pip install --quiet -c constraints.txt .
# Only agent/ is copied: the testbed package (and tests, benchmarks) stay out of the wheel and the image. The
# index is used again only for the build backend (setuptools, wheel) of the agent's own wheel.
COPY agent/ agent/
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/fault-agent/bin/pip install --quiet --no-deps --force-reinstall . \
    && /opt/fault-agent/bin/pip uninstall --quiet --yes pip setuptools wheel \
    && find /opt/fault-agent -depth -type d \( -name tests -o -name test \) -path '*/site-packages/*' \
       -exec rm -rf {} + \
    && rm -f /opt/fault-agent/bin/activate* /opt/fault-agent/bin/Activate.ps1

# --- final stage: the base, the virtualenv, config/; no pip, no build tools, no source tree --------------------
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/fault-agent/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FAULT_AGENT_LOG__FORMAT=json
RUN groupadd --gid 10001 fault-agent \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fault-agent \
    && mkdir -p /var/lib/fault-agent/outbox \
    && chown 10001:10001 /var/lib/fault-agent/outbox
COPY --from=build /opt/fault-agent /opt/fault-agent
# Fault-level table, event schemas and the documented default settings.
COPY config/ /app/config/
WORKDIR /app
USER 10001:10001
EXPOSE 8080
VOLUME ["/var/lib/fault-agent/outbox"]
ENTRYPOINT ["fault-agent"]
CMD ["run"]
