"""Attack classes against the real server over stdio (the SDK's client, a real ``qnn-debug-mcp`` process).

For every case: a typed error (message + "Next step", no traceback, no bare "Error executing tool"), nothing
outside the root read or written (a snapshot of the outside folder — names, sizes, mtimes, contents — is
unchanged, and the outside secrets are FIFOs as well as files, so any attempt to open one would hang the
call past its bound), and afterwards the server still answers a cheap tool. Fast: no simulator run; the
only engine runs are two tiny ORT-CPU baselines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from mcp import Client

import hostile
from test_mcp_support import ok, stdio_params, write_small_cnn

pytestmark = pytest.mark.anyio
CALL_BOUND_S = 90.0
SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Arena:
    """A workspace root and an outside folder holding secrets the server must never touch."""

    def __init__(self, tmp: Path):
        self.root, self.outside = tmp / "root", tmp / "outside"
        self.root.mkdir()
        self.model = write_small_cnn(self.root, "cnn.onnx")
        write_small_cnn(self.outside, "secret.onnx")
        (self.outside / "secret.txt").write_text(SECRET)
        np.savez(self.outside / "secret.npz", x=np.zeros((1, 3, 16, 16), np.float32))
        hostile.fifo(self.outside / "trap.onnx")
        hostile.fifo(self.outside / "trap.npz")
        (self.outside / "runs").mkdir()
        hostile.fifo(self.outside / "runs" / "run.json")  # a run someone may point us at: opening it would hang
        self.before = hostile.snapshot(self.outside)

    def link(self, name: str, target: Path) -> str:
        (self.root / name).symlink_to(target, target_is_directory=target.is_dir())
        return name

    def untouched(self) -> None:
        assert hostile.snapshot(self.outside) == self.before, "something outside the root was written"


@asynccontextmanager
async def server(arena: Arena) -> AsyncIterator[Client]:
    async with Client(stdio_params(arena.root), mode="legacy") as client:
        yield client


async def typed_error(client: Client, tool: str, args: dict[str, Any], expected: str = "") -> str:
    with anyio.fail_after(CALL_BOUND_S):  # a hang (e.g. a FIFO opened) fails here
        result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, (tool, args, result.structured_content)
    assert "Next step" in text and "Traceback" not in text and "internal error" not in text, (tool, args, text)
    assert SECRET not in text
    if expected:
        import re

        assert re.search(expected, text), (tool, args, text)
    return text


async def answers_without_touching(client: Client, tool: str, args: dict[str, Any]) -> None:
    """A call that may succeed (it does not need the planted path) but must neither hang on the outside FIFOs
    nor fail untyped."""
    with anyio.fail_after(CALL_BOUND_S):
        result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in text and SECRET not in text and "internal error" not in text, text
    if result.is_error:
        assert "Next step" in text, text


async def still_serving(client: Client) -> None:
    with anyio.fail_after(30):
        answer = ok(await client.call_tool("lookup_op_constraints", {"op": "Conv"}))
    assert answer["query"] == "Conv"


def _path_cases(a: Arena) -> list[tuple[str, dict[str, Any], str]]:
    return [
        ("baseline", {"model": "../outside/secret.onnx"}, "contains '..'"),
        ("baseline", {"model": str(a.outside / "secret.onnx")}, "outside the workspace"),
        ("baseline", {"model": a.link("l.onnx", a.outside / "secret.onnx")}, "symbolic link"),
        ("baseline", {"model": a.link("ldir", a.outside) + "/secret.onnx"}, "outside the workspace"),
        ("baseline", {"model": a.link("trap.onnx", a.outside / "trap.onnx")}, "outside the workspace"),
        ("baseline", {"model": "x" * 300 + ".onnx"}, "path component of 305 bytes"),
        ("baseline", {"model": "d/" * 2040 + "m.onnx"}, "too long|not a usable path"),
        ("baseline", {"model": str(hostile.loop(a.root / "loop")) + "/m.onnx"}, "symbolic-link loop"),
        ("baseline", {"model": "cnn.onnx", "out": "loop/run", "background": False}, "symbolic-link loop"),
        ("baseline", {"model": "cnn.onnx", "out": "ldir/runs/x", "background": False}, "outside the workspace"),
        ("baseline", {"model": "cnn.onnx", "inputs": a.link("in.npz", a.outside / "secret.npz")}, "outside"),
        ("triage_log", {"log_path": a.link("log.txt", a.outside / "secret.txt")}, "outside the workspace"),
        ("toggle_shapeMutable", {"test_dir": "ldir", "value": False}, "outside the workspace"),
        ("compare", {"reference": "ldir", "target": "ldir"}, "outside the workspace"),
    ]


async def test_paths(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    async with server(a) as client:
        for tool, args, expected in _path_cases(a):
            await typed_error(client, tool, args, expected)
        (a.root / "qnn-debug-runs").symlink_to(a.outside / "runs", target_is_directory=True)
        await typed_error(client, "baseline", {"model": "cnn.onnx", "background": False}, "outside the workspace")
        await still_serving(client)
    a.untouched()


async def test_types_and_sizes(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    r = a.root
    shape = (1, 3, 16, 16)
    arr = np.zeros(shape, np.float32)
    cases = [
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.fifo(r / "fifo.npz"))}, "not a regular file"),
        ("baseline", {"model": str(hostile.fifo(r / "fifo.onnx"))}, "not a regular file"),
        ("triage_log", {"log_path": "fifo.npz"}, "not a regular file"),
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.zip_bomb(r / "bomb.npz", "x", (64, 1024, 1024))),
                      "background": False}, "over the limit|zip bomb"),
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.lying_size(r / "lie.npz", "x", arr)),
                      "background": False}, "declares 4294967295 bytes"),
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.broken_deflate(r / "z.npz", "x", arr)),
                      "background": False}, "cannot be read|not a valid"),
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.duplicate_members(r / "dup.npz", "x", arr)),
                      "background": False}, "twice"),
        ("baseline", {"model": "cnn.onnx", "inputs": str(hostile.complex_npz(r / "c.npz", "x", shape)),
                      "background": False}, "complex"),
        ("toggle_shapeMutable", {"test_dir": str(hostile.testdir(r / "t1", '{"inputs": [{"name": "x", "shape": "1x3"}]}')),
                                 "value": False}, "unusable shape"),
        ("toggle_shapeMutable", {"test_dir": str(hostile.testdir(r / "t2", {"inputs": [{"name": "x", "shape": [2**40] * 4}]})),
                                 "value": False}, "unusable shape"),
        ("toggle_shapeMutable", {"test_dir": str(hostile.testdir(r / "t3", '{"inputs": [{"name": "x", "shape": [1]}], "k": '
                                                                 + "[" * 3000 + "]" * 3000 + "}")), "value": False},
         "nested too deeply|not valid JSON"),
        # arguments the input schema itself rejects get the engine's typed answer, not the SDK's validation dump
        ("compare", {}, "BadInputError: the arguments of compare do not match its input schema .*reference: missing"),
        ("lookup_op_constraints", {"op": ["Conv2d"]}, "op: Input should be a valid string"),
        ("triage_log", {"log_text": 5}, "log_text: Input should be a valid string"),
    ]
    async with server(a) as client:
        for tool, args, expected in cases:
            text = await typed_error(client, tool, args, expected)
            assert "Error executing tool" not in text and "errors.pydantic.dev" not in text, text
        await still_serving(client)
    a.untouched()
    assert not any(p.name.startswith("qnn-debug-runs") for p in r.iterdir()) or not any((r / "qnn-debug-runs").rglob("*.npy"))


async def test_corrupt_dumps_and_run_files(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    async with server(a) as client:
        base = ok(await client.call_tool("baseline", {"model": "cnn.onnx", "mnn_gate": False, "background": False}))
        baseline = Path(base["result"]["out"])
        four = np.ones(4, np.float32).tobytes()
        dumps: list[tuple[str, list[tuple[str, str, int, str, int, str, str]], dict[str, bytes]]] = [
            ("wrong-size", [("t1", "execution_000000_tensor_0000_a.raw", 562, "4", 0, "0", "0")], {"a": four[:10]}),
            ("negative", [("t1", "execution_000000_tensor_0000_a.raw", 562, "-4", 0, "0", "0")], {"a": four}),
            ("overflow", [("t1", "execution_000000_tensor_0000_a.raw", 562, "9999999999x9999999999", 0, "0", "0")],
             {"a": four}),
            ("nan-scale", [("t1", "execution_000000_tensor_0000_a.raw", 1046, "2", 0, "nan", "0")], {"a": bytes(4)}),
            ("zero-scale", [("t1", "execution_000000_tensor_0000_a.raw", 1046, "2", 0, "0", "0")], {"a": bytes(4)}),
            ("unsafe", [("t1", "../../outside/secret.txt", 562, "4", 0, "0", "0")], {}),
        ]
        for label, rows, raws in dumps:
            d = a.root / "dumps" / label
            hostile.manifest(d, rows)
            for name, data in raws.items():
                (d / f"execution_000000_tensor_0000_{name}.raw").write_bytes(data)
            await typed_error(client, "compare", {"reference": str(baseline), "target": str(d)}, "row")
        d = a.root / "dumps" / "linked"
        hostile.manifest(d, [("t1", "execution_000000_tensor_0000_a.raw", 562, "4", 0, "0", "0")])
        (d / "execution_000000_tensor_0000_a.raw").symlink_to(a.outside / "secret.txt")
        await typed_error(client, "compare", {"reference": str(baseline), "target": str(d)}, "outside the allowed roots")
        d = a.root / "dumps" / "fifo"
        hostile.manifest(d, [("t1", "execution_000000_tensor_0000_a.raw", 562, "4", 0, "0", "0")])
        hostile.fifo(d / "execution_000000_tensor_0000_a.raw")
        await typed_error(client, "compare", {"reference": str(baseline), "target": str(d)}, "not a regular file")
        # our own JSON files pointing outside: baseline.json runs, run.json as a FIFO
        evil = a.root / "evil-baseline"
        shutil.copytree(baseline, evil)
        doc = json.loads((evil / "baseline.json").read_text())
        doc["runs"]["reference"] = "../../outside/runs"
        (evil / "baseline.json").write_text(json.dumps(doc))
        await answers_without_touching(client, "compare", {"reference": str(evil), "target": str(baseline / "reference")})
        fifo_run = a.root / "fifo-run"
        fifo_run.mkdir()
        hostile.fifo(fifo_run / "run.json")
        await typed_error(client, "compare", {"reference": str(baseline), "target": str(fifo_run)}, "not a regular file")
        # run.json model.path outside: the local re-run must not load it (compare still answers)
        moved = a.root / "moved-baseline"
        shutil.copytree(baseline, moved)
        run_json = moved / "reference" / "run.json"
        rec = json.loads(run_json.read_text())
        rec["model"]["path"] = str(a.outside / "trap.onnx")
        run_json.write_text(json.dumps(rec))
        with anyio.fail_after(CALL_BOUND_S):
            result = await client.call_tool("compare", {"reference": str(moved), "target": str(baseline / "reference"),
                                                        "background": False})
        text = " ".join(getattr(c, "text", "") for c in result.content)
        assert "Traceback" not in text and SECRET not in text
        await still_serving(client)
    a.untouched()


async def test_toggle(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    (a.outside / "input.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [1]}], "shapeMutable": True}))
    a.before = hostile.snapshot(a.outside)
    linked = a.root / "linked"
    linked.mkdir()
    (linked / "input.json").symlink_to(a.outside / "input.json")
    nan = hostile.testdir(a.root / "nan", '{"inputs": [{"name": "x", "shape": [1]}], "scale": NaN}')
    inf = hostile.testdir(a.root / "inf", '{"inputs": [{"name": "x", "shape": [1]}], "scale": 1e999}')
    fifo_dir = a.root / "fifo"
    fifo_dir.mkdir()
    hostile.fifo(fifo_dir / "input.json")
    async with server(a) as client:
        await typed_error(client, "toggle_shapeMutable", {"test_dir": "linked", "value": False}, "outside|symbolic link")
        await typed_error(client, "toggle_shapeMutable", {"test_dir": "nan", "value": False}, "not valid JSON")
        await typed_error(client, "toggle_shapeMutable", {"test_dir": "inf", "value": False}, "non-standard JSON")
        await typed_error(client, "toggle_shapeMutable", {"test_dir": "fifo", "value": False},
                          "not a regular file|no input.json")
        await still_serving(client)
    a.untouched()
    assert (linked / "input.json").is_symlink()
    assert sorted(p.name for p in nan.iterdir()) == ["input.json"] and sorted(p.name for p in inf.iterdir()) == ["input.json"]


async def test_injection(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    hostile_names = ["$(touch pwned).onnx", "a;touch pwned.onnx", "`touch pwned`.onnx", "q'uote\".onnx"]
    for name in hostile_names:
        shutil.copy(a.model, a.root / name)
    async with server(a) as client:
        for name in hostile_names[:2]:
            answer = ok(await client.call_tool("baseline", {"model": name, "mnn_gate": False, "background": False}))
            assert answer["status"] == "succeeded"
        triaged = ok(await client.call_tool("triage_log", {"log_text": "QnnDsp <E> Op `Conv$(touch pwned)` failed "
                                                           "validateOpConfig 3110 for node conv;touch pwned"}))
        import shlex

        for step in triaged["next_steps"]:
            shlex.split(step["cli"])  # every printed command parses as one shell line
            assert "$(" not in step["cli"] or "'" in step["cli"]
        refused = await client.call_tool("lookup_op_constraints", {"op": "Conv;touch pwned"})
        assert refused.is_error and "should match pattern" in " ".join(getattr(c, "text", "") for c in refused.content)
        await still_serving(client)
    assert not list(a.root.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    a.untouched()


def _run_cli(root: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "qnn_debug", "baseline", str(root / "cnn.onnx"), "--out", str(out),
                             "--no-mnn-gate", "--root", str(root), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_concurrency_two_writers_of_one_output_folder(tmp_path: Path) -> None:
    """Two engines writing one --out at once: one refuses before touching a file, the survivor's baseline checks out."""
    a = Arena(tmp_path)
    out = a.root / "shared-out"
    procs = [_run_cli(a.root, out), _run_cli(a.root, out)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], (codes, [r[1][-500:] for r in results])
    loser = json.loads(results[codes.index(2)][0])
    assert "another run" in loser["message"] or "not empty" in loser["message"]
    from qnn_debug.baseline import load_baseline
    from qnn_debug.inputs import load_npz
    from qnn_debug.runstore import sha256_arrays

    base = load_baseline(out)
    arrays, _ = load_npz(base.inputs_path, base.reference.record.model.inputs)  # type: ignore[union-attr]
    assert sha256_arrays(arrays) == base.report.inputs.sha256
    assert not list(out.rglob(".qnn-debug-writing"))
    a.untouched()


def _initialized_raw_peer(a: Arena) -> Any:
    """The server over stdio as a raw JSON-RPC peer, past the initialize handshake (closed if that fails)."""
    from test_mcp_stdio import LEGACY, RawStdio

    params = stdio_params(a.root)
    peer = RawStdio([params.command, *params.args], params.env or {}, a.root)
    try:
        peer.request("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    except BaseException:
        peer.close()
        raise
    return peer


async def test_stdout_hygiene_malformed_json_rpc_gets_an_error_reply(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    peer = _initialized_raw_peer(a)
    try:
        cases = [
            ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":["triage_log",{}]}', -32602),
            ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":'
             '{"log_text":"x","deep":' + "[" * 2000 + "]" * 2000 + "}}}", -32600),
            ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":[1,2]}}', -32602),
            ('{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":"all"}', -32602),
            ('{"jsonrpc":"2.0","id":%d,"method":42}', -32600),
        ]
        for i, (template, code) in enumerate(cases, start=100):
            peer._next_id = i - 1
            line = template % i if "%d" in template else template
            peer.proc.stdin.write(line.encode() + b"\n")  # type: ignore[union-attr]
            peer.proc.stdin.flush()  # type: ignore[union-attr]
            reply = _wait_for(peer, i)
            assert reply.get("error", {}).get("code") == code, (line[:80], reply)
        peer.proc.stdin.write(b"{not json\n")  # type: ignore[union-attr]
        peer.proc.stdin.flush()  # type: ignore[union-attr]
        peer._next_id = 199
        answer = peer.request("tools/call", {"name": "lookup_op_constraints", "arguments": {"op": "Conv"}})
        assert answer["result"]["isError"] is False
    finally:
        raw = peer.close()
    lines = [json.loads(x) for x in raw.decode().splitlines() if x.strip()]  # every stdout line is JSON
    assert any(m.get("error", {}).get("code") == -32700 for m in lines)


# Text JSON cannot carry: raw bytes that are not UTF-8, and \udcff-style escapes of a lone surrogate (in a log's
# text, in a path); each must get its error under its own id, and the server must go on answering.
NOT_UNICODE = [
    (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":'
     b'{"log_text":"step2 \xff\xfe crashed"}}}', -32700),
    (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":'
     b'{"log_text":"step2 \\udcff crashed"}}}', -32602),
    (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":'
     b'{"log_path":"logs/\\udcffrun.log"}}}', -32602),
    (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"triage_log","arguments":'
     b'{"log_path":"logs/\xc3run.log"}}}', -32700),
    (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"lookup_op_constraints","arguments":'
     b'{"op":"\\ud800"}}}', -32602),
]


def test_text_that_is_not_unicode_gets_an_error_under_its_id(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    peer = _initialized_raw_peer(a)
    try:
        for i, (template, code) in enumerate(NOT_UNICODE, start=300):
            peer.proc.stdin.write(template % i + b"\n")  # type: ignore[union-attr]
            peer.proc.stdin.flush()  # type: ignore[union-attr]
            reply = _wait_for(peer, i, timeout=20)  # bounded: no reply fails here instead of hanging
            assert reply["error"]["code"] == code and "UTF-8" in reply["error"]["message"], reply
        peer._next_id = 399
        answer = peer.request("tools/call", {"name": "lookup_op_constraints", "arguments": {"op": "Conv"}}, timeout=60)
        assert answer["result"]["isError"] is False
    finally:
        raw = peer.close()
    [json.loads(x) for x in raw.decode().splitlines() if x.strip()]  # every stdout line is JSON
    a.untouched()


def _wait_for(peer: Any, msg_id: int, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in peer._lines(deadline - time.monotonic()):
            msg = json.loads(line)
            if msg.get("id") == msg_id:
                return dict(msg)
    raise AssertionError(f"no reply to id {msg_id}")


def test_cancelled_engine_leaves_no_temp_folder(tmp_path: Path) -> None:
    """SIGTERM (what a cancelled call sends) unwinds the engine: its scratch folders are removed."""
    import signal

    a = Arena(tmp_path)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "qnn_debug", "baseline", str(a.model), "--out", str(a.root / "b"),
                             "--root", str(a.root), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(scratch)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(scratch.glob("qnn-debug-worker-*")):
        time.sleep(0.02)
    assert list(scratch.glob("qnn-debug-*")), "the engine never made its scratch folder"
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert not list(scratch.glob("qnn-debug-*")), list(scratch.iterdir())


def _spoiled_runs(a: Arena, reference: Path) -> dict[str, Path]:
    """Copies of a run whose first tensor file is a FIFO, a directory, or an .npy of strings of the right shape."""
    out = {}
    for label in ("fifo", "directory", "strings"):
        run = a.root / "spoiled" / label
        shutil.copytree(reference, run)
        hostile.spoil_first_tensor(run, label)
        out[label] = run
    return out


SPOILED = {"fifo": "not a regular file", "directory": "is a directory", "strings": "holds <U2 values \\(strings\\)"}


async def test_spoiled_tensor_files_are_refused_at_open_and_jobs_end(tmp_path: Path) -> None:
    a = Arena(tmp_path)
    async with server(a) as client:
        base = ok(await client.call_tool("baseline", {"model": "cnn.onnx", "mnn_gate": False, "background": False}))
        baseline = Path(base["result"]["out"])
        runs = _spoiled_runs(a, baseline / "reference")
        for label, run in runs.items():
            for args in ({"reference": str(baseline), "target": str(run)},  # the target's tensor
                         {"reference": str(run), "target": str(baseline / "reference")}):  # the reference's
                text = await typed_error(client, "compare", {**args, "background": False}, SPOILED[label])
                assert "tensor file" in text and "re-run the capture" in text, text
            # a background job ends (failed, with the same typed error) instead of hanging; cancel answers at once
            started = ok(await client.call_tool("compare", {"reference": str(baseline), "target": str(run),
                                                            "background": True}))
            with anyio.fail_after(CALL_BOUND_S):
                cancel = ok(await client.call_tool("job_cancel", {"job_id": started["job_id"]}))
                outcome = ok(await client.call_tool("job_result", {"job_id": started["job_id"], "wait_s": 30}))
            assert cancel["state"] in ("cancelled", "failed") and outcome["state"] in ("cancelled", "failed"), outcome
        await still_serving(client)
    a.untouched()
