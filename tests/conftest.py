"""Shared fixtures: paths to the shared real fixtures and to the real PP-OCR models."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# Real MNN-QNN dumps and ModuleBasic logs written by MNN's QNN backend on the HTP simulator. The
# team's shared folder beside the repo is the source of truth; tests/fixtures keeps a verbatim copy
# so a plain clone runs the same tests.
_SHARED_MNN = SHARED / "fixtures" / "mnn-qnn-simulator"
MNN_FIXTURES = _SHARED_MNN if _SHARED_MNN.is_dir() else REPO / "tests" / "fixtures" / "mnn-qnn-simulator"


def _rapidocr_models() -> Path:
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.origin, "rapidocr-onnxruntime is installed by make setup"
    return Path(spec.origin).parent / "models"


@pytest.fixture(scope="session")
def mnn_fixtures() -> Path:
    if not MNN_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures not found at {MNN_FIXTURES}")
    return MNN_FIXTURES


@pytest.fixture(scope="session")
def ppocr_cls() -> Path:
    return _rapidocr_models() / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


@pytest.fixture(scope="session")
def ppocr_det() -> Path:
    return _rapidocr_models() / "ch_PP-OCRv4_det_infer.onnx"


@pytest.fixture(scope="session")
def ppocr_rec() -> Path:
    return _rapidocr_models() / "ch_PP-OCRv4_rec_infer.onnx"


@pytest.fixture(scope="session")
def real_exports() -> Callable[[str, str, str], Path]:
    """``real_export(kind, model, export) -> folder``: MNN's llmexport on a random-weight toy Qwen3 / Qwen3-VL,
    built on first use and cached on disk (``tests/real_exports.py``). A failed build is a test error carrying
    the exporter's log tail."""
    import real_exports as tier

    def get(kind: str, model: str, export: str) -> Path:
        try:
            return tier.real_export(kind, model, export)  # type: ignore[arg-type]
        except tier.RealExportError as exc:
            pytest.fail(f"real export {kind}/{model}/{export} failed: {exc}", pytrace=False)

    return get


@pytest.fixture(scope="session")
def torch_exports() -> Callable[[str, str, str], Path]:
    """``torch_export(kind, model, flavour) -> .onnx``: the same toy models through ``torch.onnx.export``
    (TorchScript, TorchScript fp16, dynamo), cached like the llmexport folders."""
    import real_exports as tier

    def get(kind: str, model: str, flavour: str) -> Path:
        try:
            return tier.torch_export(kind, model, flavour)  # type: ignore[arg-type]
        except tier.RealExportError as exc:
            pytest.fail(f"torch export {kind}/{model}/{flavour} failed: {exc}", pytrace=False)

    return get


HEAVY_LIST = REPO / "tests" / "heavy_tests.txt"


def heavy_entries(path: Path = HEAVY_LIST) -> list[str]:
    """The node ids (or their starts) of the heavy tier, from ``tests/heavy_tests.txt``."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = tuple(heavy_entries())
    for item in items:
        if item.nodeid.startswith(entries):
            item.add_marker(pytest.mark.heavy)
