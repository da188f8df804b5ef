"""The HTML report's Jinja2 template (autoescaped; kept in a .py file so it ships without package-data)."""

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #111827; \
background: #f9fafb; }
header, main { max-width: 1080px; margin: 0 auto; padding: 16px 24px; }
header { border-bottom: 1px solid #e5e7eb; background: #fff; max-width: none; }
header .inner { max-width: 1032px; margin: 0 auto; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
h2 .count { color: #6b7280; font-weight: 400; }
.meta { color: #6b7280; font-size: 12px; word-break: break-all; }
.verdict { display: inline-block; padding: 4px 10px; border-radius: 6px; font-weight: 600; margin-top: 8px; }
.verdict.pass { background: #dcfce7; color: #166534; } .verdict.fail { background: #fee2e2; color: #991b1b; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 14px; min-width: 64px; }
.card b { display: block; font-size: 20px; } .card span { color: #6b7280; font-size: 12px; }
nav a { margin-right: 14px; }
table { border-collapse: collapse; background: #fff; }
table.runs { width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #f3f4f6; vertical-align: top; }
th { font-size: 12px; color: #6b7280; font-weight: 600; background: #fff; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; border-radius: 4px; padding: 0 6px; font-size: 12px; font-weight: 600; }
.error, .crashed { background: #fee2e2; color: #991b1b; } .warning { background: #fef3c7; color: #92400e; }
.info { background: #e0f2fe; color: #075985; } .passed { background: #dcfce7; color: #166534; }
.failed { background: #fee2e2; color: #991b1b; } .skipped { background: #f3f4f6; color: #4b5563; }
.tag { color: #6b7280; font-size: 12px; border: 1px solid #e5e7eb; border-radius: 4px; padding: 0 5px; }
.finding { background: #fff; border: 1px solid #e5e7eb; border-left: 4px solid #9ca3af; border-radius: 6px;
           padding: 10px 14px; margin: 10px 0; }
.finding.sev-error { border-left-color: #dc2626; } .finding.sev-warning { border-left-color: #d97706; }
.finding.sev-info { border-left-color: #0284c7; }
.finding .msg { font-weight: 600; } .hint { color: #374151; margin-top: 4px; }
.fields { display: grid; grid-template-columns: repeat(auto-fill, minmax(240px, 1fr)); gap: 2px 18px;
          margin: 8px 0 0; font-size: 13px; }
.fields div { display: flex; gap: 8px; min-width: 0; } .fields .wide-field { grid-column: 1 / -1; }
.fields dt { color: #6b7280; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px;
             white-space: nowrap; padding-top: 1px; }
.fields dd { margin: 0; word-break: break-word; font-variant-numeric: tabular-nums; }
.evidence-table { margin-top: 10px; }
.evidence-table .caption { font-size: 12px; color: #6b7280; margin-bottom: 2px; }
.evidence-table table { font-size: 12px; border: 1px solid #e5e7eb; }
.evidence-table td { font-variant-numeric: tabular-nums; white-space: nowrap; }
.evidence-table th { border-bottom: 1px solid #e5e7eb; white-space: nowrap; }
.scroll { max-height: 28em; overflow: auto; display: inline-block; max-width: 100%; border: 1px solid #e5e7eb; }
.scroll table { border: 0; } .scroll thead th { position: sticky; top: 0; }
.wide { overflow-x: auto; max-width: 100%; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
pre { background: #f3f4f6; padding: 8px; border-radius: 4px; overflow-x: auto; white-space: pre-wrap; margin: 6px 0 0; }
details.group { background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
details.group > summary { cursor: pointer; font-weight: 600; }
details.group[open] > summary { margin-bottom: 8px; }
.none { color: #166534; background: #f0fdf4; border: 1px solid #bbf7d0; border-radius: 6px; padding: 10px 14px; }
ul.skips { margin: 0; padding-left: 18px; } ul.skips li { margin: 2px 0; }
svg { max-width: 100%; height: auto; background: #fff; }
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmdoctor: {{ report.model }}</title>
<style>""" + STYLE + """</style>
</head>
<body>
{%- macro finding_card(item) %}
<div class="finding sev-{{ item.finding.severity.value }}">
<div><span class="badge {{ item.finding.severity.value }}">{{ item.finding.severity.value }}</span>
<code>{{ item.finding.check }}</code> <span class="tag">{{ item.finding.category }}</span>
<span class="msg">{{ item.finding.message }}</span>
{%- if item.finding.known %} <span class="tag">known</span>{% endif %}</div>
{% set loc = item.finding.location %}{% if loc and loc.file %}<div class="hint">at <code>{{ loc.file }}
{%- if loc.line %}:{{ loc.line }}{% endif %}</code>{% if loc.logical %} ({{ loc.logical }}){% endif %}</div>{% endif %}
{% if item.finding.hint %}<div class="hint">Fix: {{ item.finding.hint }}</div>{% endif %}
{% if item.fields %}<dl class="fields">
{% for field in item.fields %}<div{% if field.wide %} class="wide-field"{% endif %}><dt>{{ field.key }}</dt>\
<dd>{{ field.text }}</dd></div>
{% endfor %}</dl>{% endif %}
{% for svg in item.plots %}<figure>{{ svg|safe }}</figure>{% endfor %}
{% for problem in item.plot_errors %}<div class="meta">plot not drawn: {{ problem }}</div>{% endfor %}
{% for text in item.texts %}<details class="text"{% if not text.long %} open{% endif %}><summary>\
<code>{{ text.key }}</code></summary><pre>{{ text.text }}</pre></details>
{% endfor %}
{% for entry in item.tables %}{% set t = entry.table %}<div class="evidence-table">
<div class="caption"><code>{{ t.key }}</code>: {{ t.rows|length }} rows</div>
<div class="{{ 'scroll' if entry.scroll else 'wide' }}"><table>
<thead><tr>{% for column in t.columns %}<th{% if t.numeric[loop.index0] %} class="num"{% endif %}>{{ column }}\
</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}<tr>{% for value in row %}\
<td{% if t.numeric[loop.index0] %} class="num"{% endif %}>{{ value }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table></div></div>
{% endfor %}
</div>
{%- endmacro %}
<header><div class="inner">
<h1>llmdoctor report</h1>
<div class="meta">model <code>{{ report.model }}</code> · fingerprint <code>{{ report.fingerprint or "-" }}</code></div>
<div class="meta">llmdoctor {{ report.tool_version }} · {{ report.device }}/{{ report.dtype }} · \
fail-on {{ report.fail_on }} · {{ report.generated_at }}</div>
<div class="verdict {{ 'fail' if failing else 'pass' }}">{{ verdict }}</div>
</div></header>
<main>
<div class="cards">
<div class="card"><b>{{ report.checks|length }}</b><span>checks</span></div>
{% for name, n in statuses.items() %}<div class="card"><b>{{ n }}</b><span class="badge {{ name }}">{{ name }}</span>\
</div>
{% endfor %}{% for name, n in severities.items() %}<div class="card"><b>{{ n }}</b>\
<span class="badge {{ name }}">{{ name }}</span></div>
{% endfor %}<div class="card"><b>{{ "%.2f"|format(report.duration_s) }} s</b><span>total time</span></div>
</div>
<nav><a href="#problems">problems</a><a href="#notes">notes</a><a href="#passed">passed checks</a>\
<a href="#skipped">skipped checks</a></nav>
<section id="problems">
<h2>Errors and warnings <span class="count">({{ problems|length }})</span></h2>
{% for item in problems %}{{ finding_card(item) }}{% else %}<div class="none">No errors or warnings.</div>{% endfor %}
</section>
<section id="notes">
<h2>Notes <span class="count">({{ notes|length }} info)</span></h2>
{% for item in notes %}{{ finding_card(item) }}{% else %}<div class="meta">No info findings.</div>{% endfor %}
</section>
<details class="group" id="passed"><summary>Passed checks ({{ passed|length }})</summary>
<table class="runs">
<thead><tr><th>check</th><th>category</th><th>what it checks</th><th class="num">time s</th></tr></thead>
<tbody>{% for run in passed %}<tr><td><code>{{ run.id }}</code></td><td>{{ run.category }}</td>\
<td>{{ run.summary }}</td><td class="num">{{ "%.3f"|format(run.duration_s) }}</td></tr>
{% endfor %}</tbody></table>
</details>
<details class="group" id="skipped"><summary>Skipped checks ({{ statuses.skipped }})</summary>
<ul class="skips">{% for reason, ids in skipped.items() %}<li>{% for id in ids %}\
<code>{{ id }}</code>{{ ", " if not loop.last }}{% endfor %}: {{ reason }}</li>
{% endfor %}</ul>
</details>
<p class="meta">{{ summary }}{% if loaded %} · {{ loaded }}{% endif %}</p>
</main>
</body>
</html>
"""
