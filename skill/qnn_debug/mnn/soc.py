"""Snapdragon SoCs MNN's QNN tools know: QNN ``soc_id`` and Hexagon (HTP) arch, written without the ``v``.

Sources (alibaba/MNN): ``docs/inference/npu.md``, MNN2QNNModel's usage text,
``tools/script/genQNNModelsFromMNN.py`` and the Android chat app's ``QnnModule.kt`` soc/arch maps.
MNN2QNNModel takes the arch as a bare integer (``75``; ``v75`` makes its ``std::stoi`` abort), while
device library names and HTP config files carry the ``v`` (``libQnnHtpV75Skel.so``, ``"dsp_arch": "v75"``).
"""

from __future__ import annotations

from pydantic import BaseModel

from ..errors import BadInputError


class Soc(BaseModel):
    soc_id: int
    htp_arch: int
    name: str
    part: str  # Qualcomm part number as Android reports it (ro.soc.model)

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
]
_BY_ID = {s.soc_id: s for s in SOCS}
_BY_PART = {s.part.upper(): s for s in SOCS}


def _table() -> str:
    return "; ".join(f"{s.soc_id} = {s.name} (v{s.htp_arch})" for s in SOCS)


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
    if arch not in {s.htp_arch for s in SOCS} | {81}:
        raise BadInputError(f"unknown HTP arch {value!r}", hint="known archs: 68, 69, 73, 75, 79, 81")
    return arch


def resolve(soc_id: int, htp_arch: int | str | None = None) -> tuple[int, int]:
    """(soc_id, arch): the arch defaults from the table; an explicit arch that contradicts it is refused."""
    if htp_arch is None:
        return soc_id, soc_by_id(soc_id).htp_arch
    arch = parse_arch(htp_arch)
    known = _BY_ID.get(int(soc_id))
    if known is not None and known.htp_arch != arch:
        raise BadInputError(f"SoC {soc_id} ({known.name}) has HTP arch v{known.htp_arch}, not v{arch}",
                            hint=f"drop --arch or use {known.htp_arch}")
    return soc_id, arch
