"""``qnn-debug-mcp``: start the MCP server (stdio by default)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    sys.stderr.write("qnn-debug-mcp: the MCP server is not built yet\n")
    sys.exit(1)


if __name__ == "__main__":
    main()
