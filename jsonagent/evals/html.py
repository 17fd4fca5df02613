"""The HTML report: one self-contained file (inline CSS, JS and SVG, no external URL) with
the summary per variant, a bar chart of the pass rates with their 95% intervals, and a grid
of cases by variant and repeat; clicking a cell shows that run's steps."""

from __future__ import annotations

import json
from html import escape

from .report import ERROR, PASS, Report

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
.grid td{text-align:center;padding:0}
.cell{border:0;width:2.2em;height:1.8em;cursor:pointer;font-weight:bold;color:#fff}
.pass{background:#2e7d32}.fail{background:#c62828}.error{background:#f9a825}
.cell.chosen{outline:3px solid #1565c0}
#run{border:1px solid #ccc;padding:1em;margin-top:1em;white-space:normal}
#run pre{background:#f6f6f6;padding:6px;white-space:pre-wrap;margin:2px 0 8px}
.note{color:#666}
"""

_JS = """
const runs = JSON.parse(document.getElementById('runs').textContent);
function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}
function show(i) {
  const r = runs[i], box = document.getElementById('run');
  document.querySelectorAll('.cell.chosen').forEach(c => c.classList.remove('chosen'));
  document.querySelector('.cell[data-run="' + i + '"]').classList.add('chosen');
  box.replaceChildren(text('h3', r.case + ' / ' + r.variant + ' / #' + (r.repeat + 1)));
  box.append(text('p', r.verdict + ' (' + r.status + ')' + (r.why ? ': ' + r.why : '')));
  box.append(text('p', 'answer: ' + JSON.stringify(r.answer)));
  const scores = document.createElement('ul');
  r.scores.forEach(s => scores.append(text('li', s.name + ' (' + s.score.toFixed(2) + '): '
    + (s.error ? 'error: ' + s.error : s.reason))));
  box.append(scores);
  r.trace.forEach(s => {
    const step = document.createElement('div');
    step.className = 'step';
    step.append(text('b', 'step ' + s.step + ': ' + s.tool));
    step.append(text('div', s.thought, 'note'));
    step.append(text('pre', JSON.stringify(s.args, null, 1)));
    if ('observation' in s) step.append(text('pre', (s.error ? 'error: ' : '')
      + (typeof s.observation === 'string' ? s.observation : JSON.stringify(s.observation))));
    box.append(step);
  });
  if (!r.trace.length) box.append(text('p', 'no steps', 'note'));
}
document.querySelectorAll('.cell').forEach(c => c.addEventListener('click',
  () => show(+c.dataset.run)));
"""


def render(report: Report, title: str = "eval") -> str:
    summaries = report.summaries()
    rows = "".join(
        f"<tr><td>{escape(s.variant)}</td><td>{escape(s.model or '-')}</td>"
        f"<td>{escape(json.dumps(s.sampling) if s.sampling else '-')}</td>"
        f"<td>{'-' if s.rate is None else f'{s.rate:.1%}'}</td>"
        f"<td>{s.low:.2f}–{s.high:.2f}</td><td>{s.passed}</td><td>{s.failed}</td>"
        f"<td>{s.errors}</td><td>{_num(s.median_steps)}</td>"
        f"<td>{_num(s.median_seconds, '{:.2f}')}</td>"
        f"<td>{_num(s.median_tokens, '{:,.0f}')}</td>"
        f"<td>{_num(s.cost, '${:.4f}')}</td></tr>"
        for s in summaries)
    comparisons = "".join(f"<p>{escape(report.compare(report.variants[0], v).sentence)}</p>"
                          for v in report.variants[1:])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{_CSS}</style></head><body>
<h1>{escape(title)}</h1>
<p class="note">{len(report.runs)} runs of {len(report.cases)} cases. The pass rate counts the
runs scored: errors (the model endpoint failed, an evaluator could not score) are left out.</p>
<table class="summary"><tr><th>variant</th><th>model</th><th>sampling</th><th>pass rate</th>
<th>95% CI</th><th>pass</th><th>fail</th><th>errors</th><th>median steps</th><th>median s</th>
<th>median tokens</th><th>cost</th></tr>{rows}</table>
{_chart(summaries)}
{comparisons}
<h2>Runs</h2>
<p class="note">Click a cell to see that run's steps.</p>
{_grid(report)}
<div id="run"><p class="note">No run chosen.</p></div>
<script type="application/json" id="runs">{_runs_json(report)}</script>
<script>{_JS}</script>
</body></html>
"""


def _chart(summaries) -> str:
    """Bars of the pass rates, with whiskers from the low to the high end of the interval."""
    width, bar, gap, height = 480, 36, 24, 200
    left = 40
    parts = [f'<svg width="{width}" '
             f'height="{height + 60}" role="img" aria-label="pass rate per variant">',
             f'<line x1="{left}" y1="10" x2="{left}" y2="{height + 10}" stroke="#999"/>']
    for tick in (0, 0.5, 1):
        y = 10 + height * (1 - tick)
        parts.append(f'<text x="{left - 6}" y="{y + 4}" font-size="11" '
                     f'text-anchor="end">{tick:.0%}</text>')
    for i, s in enumerate(summaries):
        x = left + gap + i * (bar + gap)
        rate = s.rate or 0.0
        top = 10 + height * (1 - rate)
        parts.append(f'<rect class="bar" x="{x}" y="{top:.1f}" width="{bar}" '
                     f'height="{height * rate:.1f}" fill="#1565c0"><title>{escape(s.variant)}: '
                     f'{rate:.1%}</title></rect>')
        cx, y_low, y_high = x + bar / 2, 10 + height * (1 - s.low), 10 + height * (1 - s.high)
        parts += [f'<line x1="{cx}" y1="{y_low:.1f}" x2="{cx}" y2="{y_high:.1f}" stroke="#222"/>',
                  *(f'<line x1="{cx - 6}" y1="{y:.1f}" x2="{cx + 6}" y2="{y:.1f}" stroke="#222"/>'
                    for y in (y_low, y_high)),
                  f'<text x="{cx}" y="{height + 28}" font-size="11" text-anchor="middle">'
                  f'{escape(s.variant[:14])}</text>']
    parts.append("</svg>")
    return "".join(parts)


def _grid(report: Report) -> str:
    index = {id(r): i for i, r in enumerate(report.runs)}
    by = {(r.variant, r.case, r.repeat): r for r in report.runs}
    columns = [(v, k) for v in report.variants
               for k in range(max((r.repeat for r in report.of(v)), default=0) + 1)]
    head = "".join(f"<th>{escape(v)}<br>#{k + 1}</th>" for v, k in columns)
    body = []
    for case in report.cases:
        cells = []
        for v, k in columns:
            r = by.get((v, case, k))
            if r is None:
                cells.append("<td></td>")
                continue
            mark = {PASS: "✓", ERROR: "!"}.get(r.verdict, "✗")
            cells.append(f'<td><button class="cell {r.verdict}" data-run="{index[id(r)]}" '
                         f'title="{escape(r.verdict)}">{mark}</button></td>')
        body.append(f"<tr><td>{escape(case)}</td>{''.join(cells)}</tr>")
    return f'<table class="grid"><tr><th>case</th>{head}</tr>{"".join(body)}</table>'


def _runs_json(report: Report) -> str:
    runs = [{"variant": r.variant, "case": r.case, "repeat": r.repeat, "verdict": r.verdict,
             "status": r.status, "why": r.why, "answer": r.answer, "scores": r.scores,
             "trace": r.trace} for r in report.runs]
    # inside <script>, "</script" or "<!--" would change how the page parses; a "<" can only
    # be in a JSON string, where \u003c is the same character
    return json.dumps(runs, ensure_ascii=False).replace("<", "\\u003c")


def _num(value, form: str = "{:g}") -> str:
    return "-" if value is None else form.format(value)
