"""llm-text with an image: the wheel's MNN.llm runs a Qwen3-VL export (visual.mnn, deepstack, M-RoPE) on an image
+ prompt as the CPU reference, against another export or the phone's llm_demo (test double), with a text-only rerun
that tells an image-path fault from a text-path one; and every way the image or the folder can be refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from doubles.fake_phone import FakePhone, python_wrapper
from qnn_debug.cli import app
from qnn_debug.errors import DeviceError
from qnn_debug.llm.llm_demo import DeviceTextTarget
from qnn_debug.llm.text import LlmTextRequest, llm_text
from qnn_debug_testkit.tiny import build_tiny_export
from qnn_debug_testkit.vl import VLExportRequest, build_vl_export
from test_mcp_support import connect, error_text, ok
from vl_models import write_small_config

PROMPT = "Describe it"


def _build(root: Path, name: str, req: VLExportRequest, clean: Path | None) -> Path:
    """One export; a faulted one whose text path (which these image-row faults leave alone) does not match the clean
    export's is converted again, at most twice: MNN 3.6.1's converter writes different llm.mnn bytes from the same
    ONNX on every run and, once in four full suites on a loaded machine, one that generated garbage for any prompt."""
    for attempt in range(3):
        folder = root / (f"Qwen3-VL-{name}" + (f"-{attempt}" if attempt else ""))
        built = Path(build_vl_export(folder, req).dir)
        if clean is None:
            return built
        check = llm_text(LlmTextRequest(export_dir=str(clean), target_export=str(built), prompt=PROMPT,
                                        max_new_tokens=2, out=str(root / f"check-{name}-{attempt}")))
        if check.verdict == "match":
            return built
    return built


@pytest.fixture(scope="module")
def vl(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny and small-config Qwen3-VL exports: clean and with one image-path fault each, plus a PNG."""
    root = tmp_path_factory.mktemp("vl-text")
    small = VLExportRequest(hf_config=str(write_small_config(root / "hf")), image_grid=(6, 8))
    out = {}
    for size, base in (("tiny", VLExportRequest()), ("small", small)):
        for fault in (None, "deepstack_dropped", "mrope_chunked"):
            name = f"{size}-{fault or 'clean'}"
            out[name] = _build(root, name, base.model_copy(update={"fault": fault}),
                               None if fault is None else out[f"{size}-clean"])
    y, x = np.mgrid[0:96, 0:160]
    pixels = np.stack([(x * 1.5) % 256, (y * 2.5) % 256, ((x + y) * 3) % 256], -1).astype(np.uint8)
    Image.fromarray(pixels).save(root / "image.png")
    out["image"] = root / "image.png"
    return out


def _image_tokens(export: Path) -> int:
    """What MNN 3.6's runtime makes of any image: resized to image_size², 16-px patches, 2x2 merged."""
    side = round(json.loads((export / "llm_config.json").read_text())["image_size"] / 32)
    return side * side


@pytest.mark.parametrize("size", ["tiny", "small"])
def test_image_prompt_reference_and_image_path_faults(vl: dict[str, Path], tmp_path: Path, size: str) -> None:
    clean = vl[f"{size}-clean"]
    same = llm_text(LlmTextRequest(export_dir=str(clean), target_export=str(clean), image=str(vl["image"]), prompt=PROMPT,
                                   max_new_tokens=8, out=str(tmp_path / "same"), also_text_only=True))
    assert same.verdict == "match" and same.image_path == "both_fine" and same.mnn_version
    assert same.reference.image_tokens == _image_tokens(clean) and same.image is not None
    assert same.image.width == 160 and Path(same.image.stored).read_bytes() == vl["image"].read_bytes()
    assert same.prompt == "<img>image_0</img>" + PROMPT and same.text_only is not None
    with_image = np.load(same.reference.logits or "")
    text_only = np.load(same.text_only.reference.logits or "")
    assert np.abs(with_image[0] - text_only[0]).max() > 0.1  # the image reached the decoder
    # deepstack add dropped in layer 0: only image tokens carry deepstack features, so only the image prompt sees it
    deep = llm_text(LlmTextRequest(export_dir=str(clean), target_export=str(vl[f"{size}-deepstack_dropped"]),
                                   image=str(vl["image"]), prompt=PROMPT, max_new_tokens=8, out=str(tmp_path / "deep"),
                                   also_text_only=True))
    assert deep.verdict == "diverged" and deep.image_path == "image_path", deep.summary
    assert deep.text_only is not None and deep.text_only.verdict == "match"
    # Qwen2-VL's chunked M-RoPE sections: equal rows for text, so again only the image prompt differs
    mrope = llm_text(LlmTextRequest(export_dir=str(clean), target_export=str(vl[f"{size}-mrope_chunked"]),
                                    image=str(vl["image"]), prompt=PROMPT, max_new_tokens=8, out=str(tmp_path / "mrope"),
                                    also_text_only=True))
    assert mrope.image_path == "image_path" and mrope.text_only is not None, mrope.summary
    c, t = mrope.comparison, mrope.text_only.comparison
    assert c is not None and t is not None and c.logits_sqnr_median_db is not None and t.logits_sqnr_median_db == 200.0
    assert c.logits_sqnr_median_db < 60


def test_captured_text_is_followed_after_the_image_prompt(vl: dict[str, Path], tmp_path: Path) -> None:
    export = vl["tiny-clean"]
    r = llm_text(LlmTextRequest(export_dir=str(export), image=str(vl["image"]), prompt=PROMPT, max_new_tokens=6,
                                target_text="wwww", out=str(tmp_path / "o")))
    greedy = np.load(tmp_path / "o" / "reference" / "greedy_logits.npy")
    follow = np.load(tmp_path / "o" / "follow" / "follow_logits.npy")
    # the captured text is tokenized before the prompt: tokenizing it after would reset the image's M-RoPE positions
    assert np.array_equal(greedy[0], follow[0])
    assert r.comparison is not None and r.target is not None and r.target.tokens


def test_phone_llm_demo_gets_the_image(vl: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phone = FakePhone.install(tmp_path, monkeypatch)
    for name in ("clean", "deepstack_dropped"):
        shutil.copytree(vl[f"tiny-{name}"], phone.device(f"/data/local/tmp/{name}"))
        shutil.copy(phone.device(f"/data/local/tmp/{name}/config.json"), phone.device(f"/data/local/tmp/{name}/config_qnn.json"))
        python_wrapper(phone.device(f"/data/local/tmp/{name}/llm_demo"), "fake_llm_demo.py")
    # "Look": a prompt whose greedy answer on the tiny model is valid UTF-8 token by token, so the phone's printed
    # text tokenizes back to the same ids (llm_demo prints text, not ids)
    same = llm_text(LlmTextRequest(export_dir=str(vl["tiny-clean"]), device=DeviceTextTarget(model_dir="/data/local/tmp/clean"),
                                   image=str(vl["image"]), prompt="Look", max_new_tokens=8, out=str(tmp_path / "same")))
    assert phone.device("/data/local/tmp/clean/qnn-debug-image.png").read_bytes() == vl["image"].read_bytes()
    prompt_file = phone.device("/data/local/tmp/clean/qnn-debug-prompt.txt").read_text()
    assert prompt_file.startswith("<img>/data/local/tmp/clean/qnn-debug-image.png</img>Look")
    assert same.target is not None and same.target.demo is not None and same.verdict == "match", same.summary
    assert same.target.demo.prompt_tokens == len(same.reference.prompt_ids)  # the phone's prompt held the image too
    # the phone's text carries no logits: with the builder's printable lm_head a dropped deepstack add keeps the
    # greedy text ("0wwwwwww") while moving the logits, so the image-path fault itself is tested with
    # --target-export above; here only that the faulty phone's run is compared token by token
    deep = llm_text(LlmTextRequest(export_dir=str(vl["tiny-clean"]), image=str(vl["image"]), prompt="Look",
                                   device=DeviceTextTarget(model_dir="/data/local/tmp/deepstack_dropped"), max_new_tokens=8,
                                   out=str(tmp_path / "deep")))
    assert deep.comparison is not None and deep.comparison.steps == len(deep.target.tokens) > 0  # type: ignore[union-attr]
    # a phone whose runtime drops the image (image_size under the 32-px patch unit) would answer from the text alone
    cfg = phone.device("/data/local/tmp/clean/llm_config.json")
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "image_size": 8}))
    with pytest.raises(DeviceError, match="dropped the image"):
        llm_text(LlmTextRequest(export_dir=str(vl["tiny-clean"]), device=DeviceTextTarget(model_dir="/data/local/tmp/clean"),
                                image=str(vl["image"]), max_new_tokens=4, out=str(tmp_path / "dropped")))


def _cli(*args: str) -> tuple[int, dict[str, object]]:
    """The CLI in this process (its refusals come before any worker starts)."""
    res = CliRunner().invoke(app, ["llm-text", *args, "--json"])
    return res.exit_code, json.loads(res.stdout)


def test_cli_image_run_and_refusals(vl: dict[str, Path], tmp_path: Path) -> None:
    export = vl["small-clean"]
    run = subprocess.run([sys.executable, "-m", "qnn_debug", "llm-text", str(export), "--image", str(vl["image"]), "--prompt",
                          PROMPT, "--max-new-tokens", "4", "--out", str(tmp_path / "ok"), "--json"], capture_output=True,
                         text=True, timeout=300)
    doc = json.loads(run.stdout)
    assert run.returncode == 0 and doc["reference"]["image_tokens"] == _image_tokens(export), doc
    text_only = build_tiny_export(tmp_path / "text-only").dir
    no_visual = tmp_path / "no-visual"
    shutil.copytree(export, no_visual)
    (no_visual / "visual.mnn").unlink()
    no_ids = tmp_path / "no-ids"
    shutil.copytree(export, no_ids)
    cfg = json.loads((no_ids / "llm_config.json").read_text())
    del cfg["image_pad"]
    (no_ids / "llm_config.json").write_text(json.dumps(cfg))
    small_size = tmp_path / "small-size"
    shutil.copytree(export, small_size)
    (small_size / "llm_config.json").write_text(json.dumps({**cfg, "image_pad": 261, "image_size": 8}))
    Image.open(vl["image"]).save(tmp_path / "image.webp")
    Image.open(vl["image"]).convert("P").save(tmp_path / "image.gif")  # stb_image reads GIF, but MNN builds it without
    data = vl["image"].read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.png").write_bytes(b"not an image at all")
    image = str(vl["image"])
    cases = [
        ([text_only, "--image", image], 2, "not a vision-language export"),
        ([str(no_visual), "--image", image], 2, "has no visual.mnn"),
        ([str(no_ids), "--image", image], 2, "lacks image_pad"),
        ([str(export), "--image", str(tmp_path / "image.webp")], 2, "WEBP"),
        ([str(export), "--image", str(tmp_path / "image.gif")], 2, "GIF"),
        ([str(export), "--image", str(tmp_path / "cut.png")], 2, "cannot be decoded"),
        ([str(export), "--image", str(tmp_path / "text.png")], 2, "not an image file"),
        ([str(export), "--image", str(tmp_path / "missing.png")], 2, "does not exist"),
        ([str(export), "--prompt", "<img>/etc/hostname</img>hi"], 2, "media tag"),
        ([str(export), "--image", image, "--prompt", "<img>image_0</img>a<img>image_0</img>"], 2, "2 times"),
        ([str(export), "--image", image, "--also-text-only"], 2, "also_text_only"),
        ([str(export), "--image", image, "--device-model-dir", "/data/local/tmp/x", "--device-logits-diff"], 2,
         "llm_logits_diff"),
        ([str(small_size), "--image", image, "--max-new-tokens", "2"], 3, "Reshape error"),
    ]
    for i, (args, want_code, words) in enumerate(cases):
        code, doc = _cli(*args, "--out", str(tmp_path / f"o{i}"))
        assert code == want_code and words in str(doc["message"]), (args, doc)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_tool_takes_an_image_inside_the_workspace(vl: dict[str, Path], tmp_path: Path, anyio_backend: str) -> None:
    shutil.copytree(vl["tiny-clean"], tmp_path / "Qwen3-VL")
    shutil.copy(vl["image"], tmp_path / "photo.png")
    async with connect(tmp_path, "auto") as client:
        doc = ok(await client.call_tool("compare_llm_text", {"export_dir": "Qwen3-VL", "image": "photo.png", "prompt": PROMPT,
                                                             "max_new_tokens": 4, "background": False}))
        outside = error_text(await client.call_tool("compare_llm_text", {"export_dir": "Qwen3-VL", "image": str(vl["image"])}))
        tag = error_text(await client.call_tool("compare_llm_text", {"export_dir": "Qwen3-VL",
                                                                     "prompt": "<img>photo.png</img>x"}))
    result = doc.get("result", doc)
    assert result["reference"]["image_tokens"] == _image_tokens(vl["tiny-clean"]) and result["image"]["format"] == "PNG"
    assert Path(result["image"]["stored"]).parent == Path(result["out"])
    assert "outside the workspace" in outside, outside
    assert "media tag" in tag and "--image" in tag, tag
