# The broker image: `docker build -t shoal:0.1.0 .`; with Spark for in-broker tiering jobs
# (pyspark and a Java 17 runtime, about 700 MB more): `docker build --build-arg TIERING=true
# -t shoal:0.1.0-tiering .`. bookworm: Debian 12 has openjdk-17 (Spark 4's Java 17).
FROM python:3.11-slim-bookworm

ARG TIERING=false

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN if [ "$TIERING" = "true" ]; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --gid 10001 shoal \
    && useradd --uid 10001 --gid 10001 --home-dir /home/shoal --create-home --shell /usr/sbin/nologin shoal

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY broker ./broker
COPY walfiles ./walfiles
COPY tiering ./tiering
COPY spark_jobs ./spark_jobs
# gcc builds the one C extension (broker/protocol/_records.c) and leaves with its layer.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
    && if [ "$TIERING" = "true" ]; then pip install '.[tiering]'; else pip install .; fi \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* /src /root/.cache \
    && mkdir -p /var/lib/shoal \
    && chown shoal:shoal /var/lib/shoal

WORKDIR /var/lib/shoal
USER 10001:10001
# Kafka, inter-broker RPC, metrics (/metrics, /healthz, /readyz).
EXPOSE 9092 9093 9464
ENTRYPOINT ["shoal"]
CMD ["broker"]
