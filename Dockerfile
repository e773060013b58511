# Switchboard's image. Three stages; only the runtime stage ships, holding two folders copied in
# whole: the Python venv (/opt/switchboard) and the optional agents with their node (/opt/agents).
#
#   docker build -t switchboard .                              no agents, no node
#   docker build --build-arg AGENTS="claude codex" -t switchboard .
#
# Every stage starts from the same base, so the venv's interpreter link (/usr/local/bin/python3)
# is valid where it lands.

FROM python:3.12-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY acp ./acp
COPY bot ./bot
COPY config ./config
COPY surfaces ./surfaces
# The venv gets no pip of its own: the base image's pip installs into it, and stays behind here.
RUN python -m venv --without-pip /opt/switchboard \
    && pip --python /opt/switchboard/bin/python install --no-cache-dir .

FROM python:3.12-slim AS agents
# Words, each naming an npm agent (deploy/install_agents.py maps them; the README lists them).
ARG AGENTS=""
COPY deploy/install_agents.py /tmp/install_agents.py
RUN python /tmp/install_agents.py /opt/agents

FROM python:3.12-slim
# tini is PID 1: it hands SIGTERM to switchboard and reaps the orphans an agent's children leave
# (a Python PID 1 would keep them as zombies); bubblewrap is the agent sandbox
# (SWITCHBOARD_AGENT_SANDBOX). Unpinned (DL3008): the base's Debian release fixes their versions,
# and a pin would break the build at that release's next point update.
# The runtime carries no pip: the base image's pip and ensurepip (which `python -m venv` would
# use to bring pip back) are removed, so nothing in the container can install packages.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini bubblewrap \
    && rm -rf /var/lib/apt/lists/* \
    && python -m pip uninstall --yes pip \
    && rm -rf /usr/local/lib/python3*/ensurepip /usr/local/bin/pip*
# A fixed numeric id, so volumes and Kubernetes' runAsNonRoot see the same user everywhere.
RUN groupadd --gid 10001 switchboard \
    && useradd --create-home --uid 10001 --gid 10001 switchboard \
    && mkdir -p /home/switchboard/state /work \
    && chown switchboard:switchboard /home/switchboard/state /work
COPY --from=build /opt/switchboard /opt/switchboard
COPY --from=agents /opt/agents /opt/agents
# kiro-cli is on no registry: an image that needs it adds it on top of this one.
ENV PATH=/opt/switchboard/bin:/opt/agents/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /work
# The state store (SQLite) lives in a volume so it outlives the container; SWITCHBOARD_STATE=
# redis://... (deploy/compose.yaml) leaves the volume unused.
ENV SWITCHBOARD_STATE=/home/switchboard/state/state.db
VOLUME ["/home/switchboard/state"]
# The HTTP server of `switchboard run` (/healthz, /readyz, /metrics): on every interface inside the
# container, so a published port reaches it. The check needs no curl: bot/healthcheck.py reads the
# settings as `switchboard run` does and asks /healthz there; with SWITCHBOARD_HTTP__PORT=off (any
# case) there is no server and with 0 (any free port) no port to ask, so it passes saying why.
# -P: the working directory is the agent's workspace, whose files must not shadow our modules.
ENV SWITCHBOARD_HTTP__LISTEN=0.0.0.0 \
    SWITCHBOARD_HTTP__PORT=8765
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-P", "-m", "bot.healthcheck"]
# docker stop sends SIGTERM: running turns end with their partial output, and switchboard exits
# within 10 s (docker's default grace before SIGKILL).
ENTRYPOINT ["tini", "--", "switchboard"]
CMD ["run"]
