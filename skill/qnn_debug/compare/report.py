"""Write a comparison as ``compare.md`` (readable in 30 seconds), ``compare.json`` and a PNG plot.

The Markdown leads with the verdict sentence and the next steps, then the first failing op with its numbers,
the plot of error against execution position (target and floor, first failing op marked), the rows around
the first failing op and the worst rows, the model outputs, and what could not be aligned. Numbers follow
:mod:`.fmt` (dB with one decimal; an identical tensor reads "exact", never as the 200 dB cap).
"""

from __future__ import annotations

from pathlib import Path

from .. import fs
from ..runstore import atomic_write_text
from . import fmt
from .schema import CompareResult, TensorRow
from .trust import UNTRUSTED_HEAD

MD_FILE, JSON_FILE, PLOT_FILE = "compare.md", "compare.json", "error_by_position.png"
MAX_ROWS, MAX_UNALIGNED = 30, 20


def write_report(result: CompareResult, out: str | Path) -> dict[str, str]:
    """Write the three files into ``out`` (created if needed); returns their paths by kind."""
    d = fs.make_dirs(out, what="report directory")
    files = {"markdown": str(d / MD_FILE), "json": str(d / JSON_FILE), "plot": str(d / PLOT_FILE)}
    result.report_files = files
    plot_error(result, d / PLOT_FILE)
    atomic_write_text(d / MD_FILE, markdown(result))
    atomic_write_text(d / JSON_FILE, result.model_dump_json(indent=1))
    return files


def markdown(r: CompareResult) -> str:
    v, ff = r.verdict, r.first_failing
    title = {"ok": "healthy", "precision": "precision (no wrong op)", "quantization": "quantization error (no wrong op)",
             "real_bug": "REAL BUG", "input_not_copied": "INPUT NOT COPIED",
             "undecided": "undecided (floor and re-run missing)"}[v.kind]
    head = f"# qnn-debug compare: {title}" + (f" at `{ff.op or ff.tensor}` ({ff.op_type or 'graph input'})" if ff else "")
    lines = [head, ""]
    if r.reference_trusted is False:
        lines += [f"**{UNTRUSTED_HEAD}** (`reference_trusted: false`): the baseline's MNN CPU gate did not confirm "
                  "the reference, so the verdict below may be the reference's error; the summary says why.", ""]
    lines += [f"**Verdict:** `{v.kind}` · pattern `{v.pattern}` · confidence {v.confidence:.2f}", "",
             f"> {v.summary}", "", *_next_steps(r),
             "| | |", "|---|---|",
             f"| reference | `{r.reference}` |", f"| floor | `{r.floor or 'none (excess judged against a fixed fp16 level)'}` |",
             f"| target | `{r.target}` ({r.target_kind}, {r.precision or '?'}) |",
             f"| tensors | {r.counts.get('aligned', 0)} aligned{_aliases(r)}, {r.counts.get('unaligned', 0)} unaligned, "
             f"{r.counts.get('suspects', 0)} suspect(s), {r.counts.get('local_checks', 0)} re-run on CPU |"]
    if r.observer_effect_db:
        lines.append("| observer effect (marked vs unmarked outputs) | "
                     + ", ".join(f"{k}: {fmt.observer(x)}" for k, x in r.observer_effect_db.items()) + " |")
    lines.append("")
    if _quantized(r):
        lines += [fmt.quantized_note(_cap(r), _lsb_ok(r)), ""]
    if ff is not None:
        lines += _first_failing(r)
    lines += ["## Error along the graph", "", f"![error by position]({PLOT_FILE})", "",
              "Relative L2 error of every tensor against the fp32 reference, in execution order; the floor is the "
              "same model with every tensor rounded through fp16.", ""]
    lines += _rows_table(r)
    lines += _outputs(r)
    if r.unaligned:
        lines += [f"## Not aligned ({len(r.unaligned)})", ""]
        if r.unaligned_by_reason:
            lines += ["| how many | why |", "|---|---|", *(f"| {n} | {why} |" for why, n in r.unaligned_by_reason.items()),
                      ""]
        lines += ["| tensor | in | reason |", "|---|---|---|"]
        lines += [f"| `{u.name}` | {u.side} | {u.reason} |" for u in r.unaligned[:MAX_UNALIGNED]]
        if len(r.unaligned) > MAX_UNALIGNED:
            lines.append(f"| … | | {len(r.unaligned) - MAX_UNALIGNED} more in {JSON_FILE} |")
        lines.append("")
    if r.warnings:
        lines += ["## Warnings", "", *[f"- {w}" for w in r.warnings], ""]
    return "\n".join(lines)


def _next_steps(r: CompareResult) -> list[str]:
    """The verdict's next steps as a numbered list right under the verdict (nothing for a healthy run)."""
    steps = r.next_steps
    if not steps:
        return []
    return ["**Next steps**", "",
            *[f"{i}. `{s.cli}`" + (f" (MCP tool `{s.tool}`)" if s.tool else "") + f" — {s.why}"
              for i, s in enumerate(steps, 1)], ""]


def _cap(r: CompareResult) -> float:
    return float(r.thresholds.get("floor_cap_db", 60.0))


def _lsb_ok(r: CompareResult) -> float:
    return float(r.thresholds.get("quant_lsb_ok", 4.0))


def _quantized(r: CompareResult) -> bool:
    return r.precision == "quantized" or any(t.quantized for t in r.tensors)


def _cos(x: float | None) -> str:
    return fmt.NONE if x is None else f"{x:.6f}"


def _excess_legend(r: CompareResult) -> str:
    """What the excess column is measured from, so a capped floor never reads as a measurement."""
    jump = "*jump*: excess minus the worst excess among the op's inputs."
    if not r.floor:
        return f"*excess*: dB the target's SQNR falls below a fixed {_cap(r):g} dB fp16 level (no floor run); {jump}"
    return (f"*excess*: dB the target's SQNR falls below the fp16 floor's, capped at {_cap(r):g} dB (HTP is never "
            f"better than fp16, so a floor above that — or *exact*, identical to the reference — is judged at "
            f"{_cap(r):g} dB); {jump}")


def _first_failing(r: CompareResult) -> list[str]:
    ff, ev = r.first_failing, r.verdict.evidence
    assert ff is not None
    le = ff.local_error
    lines = ["## First failing op", "",
             "| tensor | op | type | position | target SQNR | floor SQNR | jump | local SQNR | local expected |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| `{ff.tensor}` | `{ff.op}` | {ff.op_type} | {ff.position} | {fmt.db_unit(ev.get('target_sqnr_db'))} | "
             f"{fmt.db_unit(ev.get('floor_sqnr_db'))} | {fmt.amount(ev.get('jump_db'))} dB | "
             f"{fmt.db_unit(le.sqnr_db if le else None)} | {fmt.db_unit(le.expected_sqnr_db if le else None)} |", ""]
    if ff.dump_tensor:
        lines += [f"In the target's dump it is `{ff.dump_tensor}`" + (f": `{ff.dump_file}`" if ff.dump_file else "")
                  + (f" (written by MNN op `{ff.op}`, {ff.op_type})" if ff.op else "") + ".", ""]
    if le is not None and any(source != "target" for source in le.inputs.values()):
        lines += [f"Local SQNR: {fmt.local_inputs(le.inputs).rstrip(',')}.", ""]
    if le is not None and len(le.segment) > 1:
        lines += [f"Re-run as one segment (tensors between them were not dumped): {', '.join(le.segment)}.", ""]
    trials = ev.get("trials") or []
    if trials:
        lines += ["Alternative semantics re-run on CPU with the target's inputs (SQNR against the target's output):", "",
                  "| pattern | variant | SQNR | reproduces |", "|---|---|---|---|"]
        lines += [f"| {t['pattern']} | {t['variant']} | {fmt.db_unit(t['sqnr_db'])} | {'**yes**' if t['matched'] else 'no'} |"
                  for t in trials]
        lines.append("")
    return lines


def _aliases(r: CompareResult) -> str:
    n = r.counts.get("aliases", 0)
    return f" ({n} of them target stages standing for a model tensor, shown as `stage ≡ tensor`)" if n else ""


def _first_row_name(r: CompareResult) -> str | None:
    """The row of the first failing tensor: the target tensor that stood for it, or the tensor itself."""
    ff = r.first_failing
    return None if ff is None else ff.observed_as or ff.tensor


def _rows_table(r: CompareResult) -> list[str]:
    rows = r.tensors
    pick: list[TensorRow] = []
    if r.first_failing is not None:
        idx = next((i for i, row in enumerate(rows) if row.name == _first_row_name(r)), 0)
        pick = rows[max(0, idx - 4) : idx + 6]
    worst = sorted((row for row in rows if row not in pick), key=lambda x: -(x.excess_db or 0.0))
    rail = [row for row in rows if row.note and row not in pick][:3]  # why a 65504 tensor is not the answer
    pick = sorted([*pick, *rail, *worst[: max(0, MAX_ROWS - len(pick) - len(rail))]], key=lambda x: x.position)
    out = [f"## Tensors ({len(pick)} of {len(rows)}: around the first failing op and the worst; all in {JSON_FILE})", "",
           _excess_legend(r), "",
           "| pos | tensor | op type | SQNR target | SQNR floor | excess | jump | diff rate | cosine | status |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for row in pick:
        m, f = row.metrics, row.floor_metrics or {}
        mark = " ⟵" if r.first_failing is not None and row.name == _first_row_name(r) else ""
        out.append(f"| {row.position} | `{row.label or row.name}`{mark} | {row.op_type or 'input'} | {fmt.db(m.get('sqnr_db'))} | "
                   f"{fmt.db(f.get('sqnr_db'))} | {fmt.amount(row.excess_db)} | {fmt.amount(row.jump_db)} | "
                   f"{fmt.rel(m.get('diff_rate'))} | {_cos(m.get('cosine'))} | {row.status}"
                   f"{' (at the rail, harmless)' if row.note else ''} |")
    notes = [row for row in rows if row.note]
    if notes:
        out += ["", f"At the fp16 rail but harmless ({len(notes)}): these leave ±65504 in the reference, but nothing "
                "downstream feels it, so none of them is the first failing op:", ""]
        out += [f"- `{row.label or row.name}`: {row.note}" for row in notes[:10]]
    return [*out, ""]


def _outputs(r: CompareResult) -> list[str]:
    e2e = r.verdict.evidence.get("end_to_end") or {}
    if not e2e:
        return []
    out = ["## Model outputs", "", "| output | SQNR target | SQNR floor | diff rate | cosine |", "|---|---|---|---|---|"]
    for name, m in e2e.items():
        out.append(f"| `{name}` | {fmt.db_unit(m.get('sqnr_db'))} | {fmt.db_unit(m.get('floor_sqnr_db'))} | "
                   f"{fmt.rel(m.get('diff_rate'))} | {_cos(m.get('cosine'))} |")
    out += ["", "Cosine is shown for completeness only: it recovers with depth while the error stays, so the verdict "
            "never uses it.", ""]
    return out


def plot_error(r: CompareResult, path: Path) -> None:
    """Relative L2 error vs execution position, target and floor, the first failing op marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in r.tensors if row.position >= 0]
    pos = [row.position for row in rows]

    def series(get: str) -> list[float]:
        vals = []
        for row in rows:
            m = row.metrics if get == "target" else (row.floor_metrics or {})
            x = m.get("rel_l2")
            vals.append(max(float(x), 1e-9) if x is not None else float("nan"))
        return vals

    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.9, bottom=0.14)  # fixed margins: tight_layout costs 0.2 s
    ax.semilogy(pos, series("target"), ".-", color="#c0392b", label=f"target ({r.precision or '?'})", lw=1.2, ms=3)
    if any(row.floor_metrics for row in rows):
        ax.semilogy(pos, series("floor"), ".-", color="#7f8c8d", label="fp16 floor", lw=1.0, ms=2)
    ff = r.first_failing
    if ff is not None and ff.position >= 0:
        ax.axvline(ff.position, color="#2c3e50", ls="--", lw=1)
        ax.annotate(f"first failing: {ff.op} ({ff.op_type})", xy=(ff.position, ax.get_ylim()[1]), xytext=(4, -12),
                    textcoords="offset points", fontsize=8, color="#2c3e50")
    # plain-text tick labels: log axes default to mathtext ("10^{-3}"), whose parser costs ~0.3 s per process
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("execution position (op index)")
    ax.set_ylabel("relative L2 error vs fp32")
    ax.set_title(f"{r.verdict.kind}: {r.verdict.pattern}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    fs.atomic_write_bytes(path, buf.getvalue(), what="plot")  # never written through a planted link
