"""How fast does ``qnn-debug-mcp`` answer ``tools/list`` after being spawned?

Hosts start the server per session, so its start-up is on the user's critical path. We report it
as a ratio to the floor no MCP server can beat on this machine: ``python -c "import mcp"``, measured
in the same run, interleaved, so machine load affects both alike. Target: ratio <= 1.5.
That floor includes interpreter teardown (~0.3 s here), which a running server never pays, so we
also report the stricter ratio to the import alone (``import mcp`` then ``os._exit``).

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


async def time_import_mcp(teardown: bool = True) -> float:
    """Seconds from spawn to exit of ``python -c 'import mcp'`` (without teardown: ``os._exit`` right after)."""
    code = "import mcp" if teardown else "import mcp, os; os._exit(0)"
    start = time.perf_counter()
    await anyio.run_process([sys.executable, "-c", code], check=True)
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
        floor, import_only, server, n_tools = [], [], [], 0
        for _ in range(rounds):
            floor.append(await time_import_mcp())
            import_only.append(await time_import_mcp(teardown=False))
            seconds, n_tools = await time_tools_list(Path(tmp))
            server.append(seconds)
    median = statistics.median
    ratio = median(server) / median(floor)
    return {
        "rounds": rounds, "tools": n_tools,
        "import_mcp_s": round(median(floor), 3), "import_mcp_no_teardown_s": round(median(import_only), 3),
        "spawn_to_tools_list_s": round(median(server), 3),
        "ratio": round(ratio, 3), "ratio_vs_import_only": round(median(server) / median(import_only), 3),
        "target_ratio": TARGET_RATIO, "ok": ratio <= TARGET_RATIO,
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
        print(f"  the same without teardown:       {result['import_mcp_no_teardown_s']:.3f} s")
        print(f"qnn-debug-mcp spawn -> tools/list: {result['spawn_to_tools_list_s']:.3f} s ({result['tools']} tools)")
        print(f"ratio {result['ratio']:.2f} (target <= {TARGET_RATIO}) {'OK' if result['ok'] else 'MISSED'}; "
              f"{result['ratio_vs_import_only']:.2f} against the import alone")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
