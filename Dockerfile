# offsetstore serve: the gRPC service on :50051 and Prometheus metrics on :9464.
#
#   docker build -t offsetstore .
#   docker run -e OFFSETSTORE_DATABASE_URL=postgresql://user:pass@db/offsets \
#       -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 offsetstore
#
# podman builds it too, with --format docker (its default OCI format drops the HEALTHCHECK):
#   podman build --format docker -t offsetstore .
# PYTHON_IMAGE picks the base (--build-arg PYTHON_IMAGE=...): any Debian-like image with python
# 3.11+ and its venv module on PATH, and useradd.
#
# It listens on every interface of the container (so that it can be published), with no
# TLS and no authentication: publish to 127.0.0.1 as above, or turn on TLS and tokens
# (docs/security.md, compose.tls.yaml) before publishing further.
#
# The image has no embedded PostgreSQL: OFFSETSTORE_DATABASE_URL is required. Migrations
# run at start (OFFSETSTORE_MIGRATE=false turns that off). tests/packaging/test_image.py builds
# this file with podman and runs the image (a commit and a fetch, the HEALTHCHECK, metrics,
# SIGTERM); tests/packaging/test_container.py checks what it copies against pyproject.toml and
# runs its ENV, ENTRYPOINT, CMD and HEALTHCHECK from a clean virtualenv.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# The whole build context, which .dockerignore trims to what the package is made of: a package
# folder added to pyproject.toml is copied with no line here to forget (one was, and the build failed).
# src/offsetstore/ holds the installed layout setuptools builds from, symlinks to the top-level folders.
COPY . .
# A regular (non-editable) install into a virtualenv that the final stage copies whole: the
# server extra (a plain install is the client only) and the mirror extra (confluent-kafka) so
# that every flag of `serve` works, --mirror-kafka-* included, and the otel extra (traces when OTEL_* asks). No Arrow, no Spark.
RUN python -m venv /opt/offsetstore \
    && /opt/offsetstore/bin/pip install --no-cache-dir '.[server,mirror,otel]' \
    && /opt/offsetstore/bin/offsetstore --help >/dev/null

FROM ${PYTHON_IMAGE}
# A group of the same number, so that USER's gid has a name (useradd --system would pick one below 1000).
RUN groupadd --gid 10001 offsetstore \
    && useradd --uid 10001 --gid offsetstore --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin offsetstore
COPY --from=build /opt/offsetstore /opt/offsetstore
ENV PATH=/opt/offsetstore/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    OFFSETSTORE_LISTEN=0.0.0.0:50051 \
    OFFSETSTORE_METRICS_LISTEN=0.0.0.0:9464 \
    OFFSETSTORE_LOG_FORMAT=json
# Numeric, so that a runtime can tell the user is not root without reading /etc/passwd.
USER 10001:10001
EXPOSE 50051 9464
# grpc.health.v1 on the port of OFFSETSTORE_LISTEN, over TLS and mutual TLS when the server
# serves them (server/healthcheck.py; OFFSETSTORE_HEALTHCHECK_* name its CA and client
# certificate). SERVING only while the database answers.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "offsetstore.server.healthcheck"]
ENTRYPOINT ["offsetstore"]
CMD ["serve"]
