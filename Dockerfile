# The provider as a container: `serve --config` with deploy/serve.toml, JSON logs on stderr,
# metrics at /contract/metrics (docs/operators.md, "Deploying"). Build: docker build -t
# invalidation-contracts .   Run: see docs/operators.md. Base: the 3.12.8-slim-bookworm tag
# pinned by its digest (docs/decisions.md, "The base image by digest").
FROM python:3.12.8-slim-bookworm@sha256:2199a62885a12290dc9c5be3ca0681d367576ab7bf037da120e564723292a2f0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_STATE_HOME=/var/lib

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
COPY scenarios ./scenarios
# DL3013: this installs the checkout itself; its dependencies are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN pip install ".[server,sql,postgres,otlp]" \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin contracts \
    && mkdir -p /var/lib/invalidation-contracts \
    && chown contracts /var/lib/invalidation-contracts

COPY deploy/serve.toml /etc/invalidation-contracts/serve.toml

USER 10001
WORKDIR /var/lib/invalidation-contracts
VOLUME ["/var/lib/invalidation-contracts"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/contract/live', timeout=2)"]

ENTRYPOINT ["invalidation-contracts"]
CMD ["serve", "--config", "/etc/invalidation-contracts/serve.toml"]
