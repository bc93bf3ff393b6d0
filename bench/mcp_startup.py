"""How fast does ``qnn-debug-mcp`` answer ``tools/list`` after being spawned?

Hosts start the server per session, so its start-up is on the user's critical path. We report it
as a ratio to the floor no MCP server can beat on this machine: ``python -c "import mcp"``, measured
in the same run, interleaved, so machine load affects both alike. Target: ratio <= 1.5.

Run: ``python bench/mcp_startup.py [--rounds N] [--json]``. Exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

TARGET_RATIO = 1.5


async def time_import_mcp() -> float:
    """Seconds from spawn to exit of ``python -c 'import mcp'``."""
    start = time.perf_counter()
    await anyio.run_process([sys.executable, "-c", "import mcp"], check=True)
    return time.perf_counter() - start


async def time_tools_list(root: Path) -> tuple[float, int]:
    """Seconds from spawning the server to the ``tools/list`` answer (legacy handshake, as hosts do)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "qnn_debug_mcp", "--root", str(root)],
                                   cwd=str(root))
    start = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        tools = await client.list_tools()
        elapsed = time.perf_counter() - start
    return elapsed, len(tools.tools)


async def measure(rounds: int) -> dict[str, float | int | bool]:
    with tempfile.TemporaryDirectory(prefix="qnn-debug-mcp-bench-") as tmp:
        await time_import_mcp()  # warm the OS file cache for both sides
        await time_tools_list(Path(tmp))
        floor, server, n_tools = [], [], 0
        for _ in range(rounds):
            floor.append(await time_import_mcp())
            seconds, n_tools = await time_tools_list(Path(tmp))
            server.append(seconds)
    ratio = statistics.median(server) / statistics.median(floor)
    return {
        "rounds": rounds, "tools": n_tools,
        "import_mcp_s": round(statistics.median(floor), 3), "spawn_to_tools_list_s": round(statistics.median(server), 3),
        "ratio": round(ratio, 3), "target_ratio": TARGET_RATIO, "ok": ratio <= TARGET_RATIO,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args()
    result = anyio.run(measure, max(1, args.rounds))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"python -c 'import mcp':            {result['import_mcp_s']:.3f} s (median of {result['rounds']})")
        print(f"qnn-debug-mcp spawn -> tools/list: {result['spawn_to_tools_list_s']:.3f} s ({result['tools']} tools)")
        print(f"ratio {result['ratio']:.2f} (target <= {TARGET_RATIO}) {'OK' if result['ok'] else 'MISSED'}")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
