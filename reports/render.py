"""Writers: a `Report` as Markdown, self-contained HTML (no external files or CDN: CSS inline, charts as PNG
data URIs), LaTeX (booktabs) and CSV. They format; they compute nothing."""

from __future__ import annotations

import base64
import html as html_lib
import re
from pathlib import Path

import pandas as pd

from specbench.reports.document import Report
from specbench.reports.tables import Table

NUMERIC = re.compile(r"^[-+–]?[\d.]|^–$|^ref$")
PREAMBLE = "Computed by `specbench report` from the runs' answer files (answers/*.jsonl) and manifests only."


def _numeric_columns(table: Table) -> list[bool]:
    """Right-align a column when every cell looks like a number."""
    frame = table.display
    return [i > 0 and all(NUMERIC.match(str(v)) for v in frame[c]) for i, c in enumerate(frame.columns)]


def _group_starts(table: Table) -> list[bool]:
    """Rows where the drafter changes, in tables with several rows per drafter."""
    frame = table.display
    if "Drafter" not in frame.columns or frame["Drafter"].is_unique:
        return [False] * len(frame)
    values = list(frame["Drafter"])
    return [i > 0 and values[i] != values[i - 1] for i in range(len(values))]


# ---- Markdown ----------------------------------------------------------------------------------------------
def _md_cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(table: Table) -> str:
    frame = table.display
    right = _numeric_columns(table)
    lines = ["| " + " | ".join(_md_cell(c) for c in frame.columns) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def markdown(report: Report, images: dict[str, str]) -> str:
    out = [f"# {report.title}", "", PREAMBLE, ""]
    for section in report.sections:
        out += [f"## {section.title}", ""]
        out += [f"> Note: {note}" for note in section.notes] + ([""] if section.notes else [])
        for table in section.tables:
            out += [f"### {table.title}", "", markdown_table(table), ""]
            out += [f"*{table.note}*", ""] if table.note else []
        for chart in section.charts:
            if chart.name in images:
                out += [f"![{chart.title}]({images[chart.name]})", "", f"*{chart.title}*", ""]
    return "\n".join(out)


# ---- HTML ------------------------------------------------------------------------------------------------
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;
color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-top:1.5em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0;font-variant-numeric:tabular-nums}
th,td{padding:.25em .6em;text-align:left;vertical-align:top}
thead th{border-top:2px solid #222;border-bottom:1px solid #222}
tbody tr:last-child td{border-bottom:2px solid #222}
td.num,th.num{text-align:right}tr.group td{border-top:1px solid #bbb}
p.note{font-size:.8em;color:#555;max-width:60em}div.warn{background:#fff6e0;border-left:3px solid #e69f00;
padding:.3em .8em;margin:.5em 0;font-size:.9em}
figure{margin:1em 0}figure img{max-width:100%;height:auto}figcaption{font-size:.85em;color:#444}
"""


def html_table(table: Table) -> str:
    frame = table.display
    right = _numeric_columns(table)
    starts = _group_starts(table)
    esc = html_lib.escape
    head = "".join(f'<th{" class=num" if r else ""}>{esc(str(c))}</th>' for c, r in zip(frame.columns, right))
    body = []
    for row, start in zip(frame.itertuples(index=False), starts):
        cells = "".join(f'<td{" class=num" if r else ""}>{esc(str(v))}</td>' for v, r in zip(row, right))
        body.append(f'<tr{" class=group" if start else ""}>{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html(report: Report, pngs: dict[str, bytes]) -> str:
    esc = html_lib.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{esc(report.title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{esc(report.title)}</h1>", f"<p>{esc(PREAMBLE)}</p>"]
    for section in report.sections:
        out.append(f"<h2>{esc(section.title)}</h2>")
        out += [f'<div class="warn">Note: {esc(note)}</div>' for note in section.notes]
        for table in section.tables:
            out += [f"<h3>{esc(table.title)}</h3>", html_table(table)]
            if table.note:
                out.append(f'<p class="note">{esc(table.note)}</p>')
        for chart in section.charts:
            data = base64.b64encode(pngs[chart.name]).decode("ascii")
            out.append(f'<figure><img alt="{esc(chart.title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{esc(chart.title)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---- LaTeX -----------------------------------------------------------------------------------------------
TEX_SPECIAL = {"--": "-{}-", "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "τ": r"$\tau$", "α": r"$\alpha$",
               "×": r"$\times$", "≥": r"$\geq$", "≤": r"$\leq$", "–": "--", "—": "---", "<": r"\textless{}",
               ">": r"\textgreater{}"}
TEX_PATTERN = re.compile("|".join(re.escape(k) for k in TEX_SPECIAL))


def tex_escape(text: object) -> str:
    return TEX_PATTERN.sub(lambda m: TEX_SPECIAL[m.group(0)], str(text))


def latex_table(table: Table, wrap: bool = False) -> str:
    """A booktabs ``table`` float; ``wrap`` gives text columns a fixed width (long values such as paths)."""
    frame = table.display
    right = _numeric_columns(table)
    if wrap:
        width = 0.78 / max(len(frame.columns) - 1, 1)
        spec = "l" + "".join(rf">{{\raggedright\arraybackslash}}p{{{width:.2f}\linewidth}}" for _ in frame.columns[1:])
    else:
        spec = "".join("r" if r else "l" for r in right)
    rows = []
    for row, start in zip(frame.itertuples(index=False), _group_starts(table)):
        rows += [r"\midrule"] if start else []
        rows.append(" & ".join(tex_escape(v) for v in row) + r" \\")
    tabular = "\n".join([rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
                         " & ".join(tex_escape(c) for c in frame.columns) + r" \\", r"\midrule", *rows,
                         r"\bottomrule", r"\end{tabular}"])
    if len(frame.columns) > 9 and not wrap:
        # shrink to the line width only when wider (\width is the box's natural width inside \resizebox)
        tabular = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%" + "\n" + tabular + "}"
    caption = tex_escape(table.title) + (f". {tex_escape(table.note)}" if table.note else "")
    label = re.sub(r"[^a-z0-9]+", "-", table.name.lower())
    return "\n".join([r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{caption}}}",
                      rf"\label{{tab:{label}}}", tabular, r"\end{table}"])


def latex(report: Report, images: dict[str, str]) -> str:
    out = [r"% Generated by `specbench report`. Tables need \usepackage{booktabs} (and graphicx for \resizebox);",
           r"% charts are included from charts/ (PDF or PNG; write them with --charts png,pdf).",
           r"\documentclass[10pt]{article}", r"\usepackage[margin=2cm]{geometry}", r"\usepackage[T1]{fontenc}",
           r"\usepackage{booktabs,graphicx,array}", r"\begin{document}",
           rf"\section*{{{tex_escape(report.title)}}}", tex_escape(PREAMBLE).replace("`", ""), ""]
    for section in report.sections:
        out.append(rf"\subsection*{{{tex_escape(section.title)}}}")
        out += [rf"\noindent\textbf{{Note:}} {tex_escape(note)}\par" for note in section.notes]
        for table in section.tables:
            out += [latex_table(table, wrap=table.name == "context"), ""]
        for chart in section.charts:
            if chart.name in images:
                stem = Path(images[chart.name]).with_suffix("").as_posix()
                width = rf"{chart.width_share:.2f}\linewidth"  # the size it was drawn for
                out += [r"\begin{figure}[htbp]", r"\centering", rf"\includegraphics[width={width}]{{{stem}}}",
                        rf"\caption{{{tex_escape(chart.title)}}}", r"\end{figure}", ""]
        out.append(r"\clearpage")
    out.append(r"\end{document}")
    return "\n".join(out) + "\n"


# ---- CSV -------------------------------------------------------------------------------------------------
def write_csv(report: Report, folder: Path) -> list[Path]:
    """One CSV per table name; tables repeated per run are stacked with a leading ``run`` column."""
    folder.mkdir(parents=True, exist_ok=True)
    frames: dict[str, list[pd.DataFrame]] = {}
    for section in report.sections[1:]:
        for table in section.tables:
            frames.setdefault(table.name, []).append(table.data.assign(run=section.title))
    paths = []
    for table in report.sections[0].tables:
        paths.append(folder / f"{table.name}.csv")
        table.data.to_csv(paths[-1], index=False, float_format="%.6g")
    for name, parts in frames.items():
        frame = pd.concat(parts, ignore_index=True)
        frame = frame[["run", *[c for c in frame.columns if c != "run"]]]
        paths.append(folder / f"{name}.csv")
        frame.to_csv(paths[-1], index=False, float_format="%.6g")
    return paths
