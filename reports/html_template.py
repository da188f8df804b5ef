"""The HTML report's Jinja2 template (autoescaped; kept in a .py file so it ships without package-data)."""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmdoctor: {{ report.model }}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #111827; background: #f9fafb; }
header, main { max-width: 1080px; margin: 0 auto; padding: 16px 24px; }
header { border-bottom: 1px solid #e5e7eb; background: #fff; max-width: none; }
header .inner { max-width: 1032px; margin: 0 auto; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
.meta { color: #6b7280; font-size: 12px; word-break: break-all; }
.verdict { display: inline-block; padding: 4px 10px; border-radius: 6px; font-weight: 600; margin-top: 8px; }
.verdict.pass { background: #dcfce7; color: #166534; } .verdict.fail { background: #fee2e2; color: #991b1b; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 16px 0; }
.card { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 14px; min-width: 84px; }
.card b { display: block; font-size: 20px; } .card span { color: #6b7280; font-size: 12px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #f3f4f6; vertical-align: top; }
th { font-size: 12px; color: #6b7280; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; border-radius: 4px; padding: 0 6px; font-size: 12px; font-weight: 600; }
.error, .crashed { background: #fee2e2; color: #991b1b; } .warning { background: #fef3c7; color: #92400e; }
.info { background: #e0f2fe; color: #075985; } .passed { background: #dcfce7; color: #166534; }
.failed { background: #fee2e2; color: #991b1b; } .skipped { background: #f3f4f6; color: #4b5563; }
.finding { background: #fff; border: 1px solid #e5e7eb; border-left: 4px solid #9ca3af; border-radius: 6px;
           padding: 10px 14px; margin: 10px 0; }
.finding.sev-error { border-left-color: #dc2626; } .finding.sev-warning { border-left-color: #d97706; }
.finding.sev-info { border-left-color: #0284c7; }
.finding .msg { font-weight: 600; } .hint { color: #374151; margin-top: 4px; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
pre { background: #f3f4f6; padding: 8px; border-radius: 4px; overflow-x: auto; white-space: pre-wrap; }
nav a { margin-right: 10px; } svg { max-width: 100%; height: auto; background: #fff; }
</style>
</head>
<body>
<header><div class="inner">
<h1>llmdoctor report</h1>
<div class="meta">model <code>{{ report.model }}</code> · fingerprint <code>{{ report.fingerprint or "-" }}</code></div>
<div class="meta">llmdoctor {{ report.tool_version }} · {{ report.device }}/{{ report.dtype }} · fail-on {{ report.fail_on }} · {{ report.generated_at }}</div>
<div class="verdict {{ 'fail' if failing else 'pass' }}">{{ verdict }}</div>
</div></header>
<main>
<div class="cards">
<div class="card"><b>{{ report.checks|length }}</b><span>checks</span></div>
{% for name, n in statuses.items() %}<div class="card"><b>{{ n }}</b><span class="badge {{ name }}">{{ name }}</span></div>
{% endfor %}{% for name, n in severities.items() %}<div class="card"><b>{{ n }}</b><span class="badge {{ name }}">{{ name }}</span></div>
{% endfor %}<div class="card"><b>{{ "%.2f"|format(report.duration_s) }} s</b><span>total time</span></div>
</div>
<nav>{% for section in sections %}<a href="#cat-{{ section.category }}">{{ section.category }}</a>{% endfor %}</nav>
{% for section in sections %}
<section id="cat-{{ section.category }}">
<h2>{{ section.category }}</h2>
{% for item in section.findings %}
<div class="finding sev-{{ item.finding.severity.value }}">
<div><span class="badge {{ item.finding.severity.value }}">{{ item.finding.severity.value }}</span>
<code>{{ item.finding.check }}</code> <span class="msg">{{ item.finding.message }}</span></div>
{% if item.finding.hint %}<div class="hint">Fix: {{ item.finding.hint }}</div>{% endif %}
{% for svg in item.plots %}<figure>{{ svg|safe }}</figure>{% endfor %}
{% for problem in item.plot_errors %}<div class="meta">plot not drawn: {{ problem }}</div>{% endfor %}
{% if item.finding.evidence %}<details{% if not item.long %} open{% endif %}><summary>evidence</summary><pre>{{ item.evidence }}</pre></details>{% endif %}
</div>
{% endfor %}
<table>
<tr><th>check</th><th>summary</th><th>status</th><th class="num">time s</th><th>note</th></tr>
{% for run in section.runs %}<tr><td><code>{{ run.id }}</code></td><td>{{ run.summary }}</td>
<td><span class="badge {{ run.status }}">{{ run.status }}</span></td><td class="num">{{ "%.3f"|format(run.duration_s) }}</td><td>{{ run.reason }}</td></tr>
{% endfor %}</table>
</section>
{% endfor %}
<p class="meta">{{ summary }}{% if loaded %} · {{ loaded }}{% endif %}</p>
</main>
</body>
</html>
"""
