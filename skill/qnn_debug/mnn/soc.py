"""Snapdragon SoCs MNN's QNN tools know: QNN ``soc_id`` and Hexagon (HTP) arch, written without the ``v``.

Sources (alibaba/MNN): ``docs/inference/npu.md``, MNN2QNNModel's usage text,
``tools/script/genQNNModelsFromMNN.py`` and the Android chat app's ``QnnModule.kt`` soc/arch maps.
MNN2QNNModel takes the arch as a bare integer (``75``; ``v75`` makes its ``std::stoi`` abort), while
device library names and HTP config files carry the ``v`` (``libQnnHtpV75Skel.so``, ``"dsp_arch": "v75"``).

This is the project's only SoC table: the HTP simulator's accepted ``soc_model`` values
(``targets.qnn_ep``), MNN2QNNModel's and the device's soc/arch, the probe's part-number lookup and every
``--soc`` default (:data:`DEFAULT_SOC`) come from here. Ids 53, 60 and 87 are accepted by the HTP
simulator (measured) but MNN's sources name no device for them, so they carry no name or part number.
"""

from __future__ import annotations

from pydantic import BaseModel

from ..errors import BadInputError


class Soc(BaseModel):
    soc_id: int
    htp_arch: int
    name: str | None = None  # None: a QNN soc_id no MNN source names a device for
    part: str | None = None  # Qualcomm part number as Android reports it (ro.soc.model)

    @property
    def label(self) -> str:
        return self.name or f"soc {self.soc_id}"

    @property
    def arch_tag(self) -> str:
        """``v75`` style, as in library names and HTP JSON configs."""
        return f"v{self.htp_arch}"


SOCS: list[Soc] = [
    Soc(soc_id=30, htp_arch=68, name="Snapdragon 888", part="SM8350"),
    Soc(soc_id=36, htp_arch=69, name="Snapdragon 8 Gen 1", part="SM8450"),
    Soc(soc_id=42, htp_arch=69, name="Snapdragon 8+ Gen 1", part="SM8475"),
    Soc(soc_id=43, htp_arch=73, name="Snapdragon 8 Gen 2", part="SM8550"),
    Soc(soc_id=57, htp_arch=75, name="Snapdragon 8 Gen 3", part="SM8650"),
    Soc(soc_id=69, htp_arch=79, name="Snapdragon 8 Elite", part="SM8750"),
    Soc(soc_id=53, htp_arch=73),
    Soc(soc_id=60, htp_arch=73),
    Soc(soc_id=87, htp_arch=81),
]
DEFAULT_SOC = 69  # Snapdragon 8 Elite: the newest SoC MNN documents; its HTP runs fp16
FP32_SOCS = frozenset({0, 30})  # soc_model values whose HTP-simulator numerics are fp32-accurate (0: none given)
_BY_ID = {s.soc_id: s for s in SOCS}
_BY_PART = {s.part.upper(): s for s in SOCS if s.part}
ARCHS = frozenset(s.htp_arch for s in SOCS)
SOC_IDS = sorted(_BY_ID)


def _table() -> str:
    return "; ".join(f"{s.soc_id} = {s.name} (v{s.htp_arch})" for s in SOCS if s.name)


def default_soc_help() -> str:
    """``69 = Snapdragon 8 Elite``: how option help texts name the default."""
    return f"{DEFAULT_SOC} = {_BY_ID[DEFAULT_SOC].label}"


def known_soc_hint() -> str:
    """Every soc_model the table knows, the named ones spelled out (for 'unknown soc' hints)."""
    named = ", ".join(f"{s.soc_id} = {s.name}" for s in SOCS if s.name)
    return f"use one of {SOC_IDS} ({named})"


def arch_for(soc_id: int) -> int | None:
    """The HTP arch of a known soc_id, else None."""
    soc = _BY_ID.get(int(soc_id))
    return soc.htp_arch if soc is not None else None


def soc_by_id(soc_id: int) -> Soc:
    """The SoC for a QNN soc_id; unknown ids are refused with the table in the hint."""
    soc = _BY_ID.get(int(soc_id))
    if soc is None:
        raise BadInputError(f"unknown SoC id {soc_id}", hint=f"known SoC ids: {_table()}; or pass --arch explicitly")
    return soc


def soc_by_part(part: str) -> Soc | None:
    """Match Android's ``ro.soc.model`` (e.g. ``SM8650``; a trailing letter variant like ``SM8350P`` too)."""
    key = part.strip().upper()
    return _BY_PART.get(key) or _BY_PART.get(key.rstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))


def parse_arch(value: int | str) -> int:
    """Accept ``75`` or ``v75`` and return 75; anything else is bad input."""
    text = str(value).strip().lower().removeprefix("v")
    if not text.isdigit():
        raise BadInputError(f"invalid HTP arch {value!r}", hint="give the Hexagon arch as a number, e.g. 75 (for v75)")
    arch = int(text)
    if arch not in ARCHS:
        raise BadInputError(f"unknown HTP arch {value!r}", hint=f"known archs: {', '.join(map(str, sorted(ARCHS)))}")
    return arch


def resolve(soc_id: int, htp_arch: int | str | None = None) -> tuple[int, int]:
    """(soc_id, arch): the arch defaults from the table; an explicit arch that contradicts it is refused."""
    if htp_arch is None:
        return soc_id, soc_by_id(soc_id).htp_arch
    arch = parse_arch(htp_arch)
    known = _BY_ID.get(int(soc_id))
    if known is not None and known.htp_arch != arch:
        raise BadInputError(f"SoC {soc_id} ({known.label}) has HTP arch v{known.htp_arch}, not v{arch}",
                            hint=f"drop --arch or use {known.htp_arch}")
    return soc_id, arch
