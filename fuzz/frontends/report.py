"""A fuzz run's JSON report (``--fuzz-report``) as one self-contained HTML page: ``parityfuzz report RUN.json -o
report.html`` (or ``python -m parityfuzz.frontends.report``).

The page shows the run's figures; per target, its cases per verdict over time, a pairwise feature-coverage
heatmap (which pairs of features the run drew together, and which it never did) and how much of each seed
test's hand-written grid it covered; then every finding with its case tree, its first divergence, where it
begins, and the commands that reproduce it.  No script, no external file: inline CSS and SVG.

Exit codes: 0 written; 2 bad input (the message names the file and the field).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import sys
from pathlib import Path

#: Verdict kinds in display order, with their colours.
VERDICT_COLOURS = {"pass": "#4caf50", "mismatch": "#e53935", "error": "#fb8c00", "crash": "#8e24aa", "hang": "#3949ab"}
#: Features shown in a heatmap at most (the most drawn); the rest are counted in a note.
HEATMAP_FEATURES = 48
TIME_BUCKETS = 24

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:36px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f5f5f5} td.l,th.l{text-align:left}
.kind{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}
.finding{border:1px solid #e0e0e0;border-left:5px solid #e53935;padding:8px 14px;margin:14px 0}
.bar{background:#eee;width:160px;height:10px;display:inline-block;vertical-align:middle}
.bar span{display:block;height:10px;background:#43a047}
.muted{color:#777;font-size:13px} svg text{font-size:10px;font-family:system-ui,sans-serif}
"""


class ReportError(ValueError):
    """The JSON is not a parityfuzz run report."""


def load(path: str | Path) -> dict:
    """The report at ``path``, checked for the fields the page reads."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ReportError(f"{path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path}: not a run report (a JSON object written by --fuzz-report)")
    for key, kind in (("targets", dict), ("failures", list), ("verdicts", dict), ("cases_run", int)):
        if not isinstance(data.get(key), kind):
            raise ReportError(f"{path}: field {key!r} is missing or not a {kind.__name__} (written by --fuzz-report?)")
    return data


def _e(text) -> str:
    return html.escape(str(text))


def _legend() -> str:
    return "".join(f'<span class="kind" style="background:{c}"></span>{k}' for k, c in VERDICT_COLOURS.items())


def timeline_svg(timeline: list, width: int = 560, height: int = 140) -> str:
    """Cases per verdict over time: a stacked bar per slice of the target's time in the run (seconds since the run
    began).  ``timeline``: ``[seconds, verdict kind, cases]`` per slice of the run (``[seconds, kind]`` per case in
    reports written before the timeline was bucketed)."""
    if not timeline:
        return '<p class="muted">no cases</p>'
    start, end = min(entry[0] for entry in timeline), max(entry[0] for entry in timeline)
    span = (end - start) or 1.0
    buckets = [dict.fromkeys(VERDICT_COLOURS, 0) for _ in range(TIME_BUCKETS)]
    for t, kind, *n in timeline:
        index = min(TIME_BUCKETS - 1, int((t - start) / span * TIME_BUCKETS))
        buckets[index][kind if kind in VERDICT_COLOURS else "error"] += n[0] if n else 1
    top = max(sum(b.values()) for b in buckets) or 1
    left, bottom = 34, 18
    w = (width - left) / TIME_BUCKETS
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="cases per verdict over time">']
    for i, b in enumerate(buckets):
        y = height - bottom
        for kind, n in b.items():
            if n:
                h = n / top * (height - bottom - 8)
                y -= h
                parts.append(f'<rect x="{left + i * w:.1f}" y="{y:.1f}" width="{w - 1:.1f}" height="{h:.1f}" '
                             f'fill="{VERDICT_COLOURS[kind]}"><title>{n} {kind}</title></rect>')
    parts.append(f'<text x="0" y="12">{top}</text><text x="0" y="{height - bottom}">0</text>')
    parts.append(f'<text x="{left}" y="{height - 4}">{start:.0f} s</text>'
                 f'<text x="{width - 40}" y="{height - 4}">{end:.0f} s</text></svg>')
    return "".join(parts)


def heatmap_svg(features: dict, pairs: dict) -> str:
    """Pairwise coverage: cell (a, b) is the number of cases drawn with both features (log-scaled green); a pair
    never drawn together is red.  Features sorted by name, so one dimension's values sit together."""
    shown = sorted(sorted(features, key=lambda f: -features[f])[:HEATMAP_FEATURES])
    if len(shown) < 2:
        return '<p class="muted">fewer than two features drawn</p>'
    cell, label = 11, 170
    size = label + cell * len(shown)
    top = max(pairs.values(), default=1)
    parts = [f'<svg width="{size}" height="{size}" role="img" aria-label="pairwise feature coverage">']
    for i, f in enumerate(shown):
        parts.append(f'<text x="{label - 4}" y="{label + i * cell + 9}" text-anchor="end">{_e(f)}</text>')
        parts.append(f'<text transform="translate({label + i * cell + 8},{label - 4}) rotate(-60)">{_e(f)}</text>')
    for i, a in enumerate(shown):
        for j, b in enumerate(shown):
            if i == j:
                n, colour = features[a], "#bdbdbd"
            else:
                n = pairs.get(" & ".join(sorted((a, b))), 0)
                shade = int(230 - 170 * math.log1p(n) / math.log1p(top))
                colour = f"rgb({shade},{min(255, shade + 40)},{shade})" if n else "#ef9a9a"
            parts.append(f'<rect x="{label + j * cell}" y="{label + i * cell}" width="{cell - 1}" height="{cell - 1}" '
                         f'fill="{colour}"><title>{_e(a)} &amp; {_e(b)}: {n} cases</title></rect>')
    parts.append("</svg>")
    never = sum(1 for i, a in enumerate(shown) for b in shown[i + 1:] if not pairs.get(" & ".join(sorted((a, b))), 0))
    note = (f'<p class="muted">{len(shown)} of {len(features)} features shown (the most drawn); {never} of '
            f'{len(shown) * (len(shown) - 1) // 2} pairs among them never drawn together (red); some cannot be '
            "(a feature's values exclude each other).</p>")
    return note + "".join(parts)


def grids_html(grids: dict) -> str:
    if not grids:
        return '<p class="muted">no seed grid is about this target\'s families</p>'
    rows = []
    for source, g in grids.items():
        share = g["covered"] / g["points"] if g["points"] else 0.0
        missing = ", ".join(g["missing"][:6]) + (f" ... ({len(g['missing'])} in all)" if len(g["missing"]) > 6 else "")
        rows.append(f'<tr><td class="l">{_e(source)}</td><td>{g["covered"]} / {g["points"]}</td>'
                    f'<td><span class="bar"><span style="width:{share * 100:.0f}%"></span></span></td>'
                    f'<td class="l muted">{_e(missing) or "every point drawn"}</td></tr>')
    return ('<table><tr><th class="l">seed test grid</th><th>points drawn</th><th></th>'
            '<th class="l">never drawn</th></tr>' + "".join(rows) + "</table>")


def dimensions_html(coverage: dict | None) -> str:
    """The training-loop dimensions a target draws: share of its cases, cases, second of the first; the thin ones
    marked; the ones it does not draw, with why (:func:`parityfuzz.engine.stats.dimension_coverage`)."""
    if not coverage or not (coverage.get("shares") or coverage.get("not_drawn")):
        return '<p class="muted">no dimension table for this target</p>'
    thin, first = set(coverage.get("thin", ())), coverage.get("first_seconds", {})
    rows = [f'<tr><td class="l">{_e(d)}{" (thin)" if d in thin else ""}</td><td>{s:.0%}</td>'
            f'<td>{coverage["cases"].get(d, 0)}</td><td>{_e(f"{first[d]:.0f} s") if d in first else "-"}</td>'
            f'<td><span class="bar"><span style="width:{s * 100:.0f}%"></span></span></td></tr>'
            for d, s in coverage["shares"].items()]
    absent = "".join(f'<tr><td class="l muted">{_e(d)}</td><td colspan="4" class="l muted">not drawn: {_e(why)}</td>'
                     f'</tr>' for d, why in coverage.get("not_drawn", {}).items())
    return ('<table><tr><th class="l">dimension</th><th>share</th><th>cases</th><th>first</th><th></th></tr>'
            + "".join(rows) + absent + "</table>"
            + f'<p class="muted">{len(coverage.get("pairs", {}))} pairs of dimensions met together'
            + (f'; shares of the {coverage["drawn"]} cases drawn (shrink runs apart)' if "drawn" in coverage else "")
            + '</p>')


def finding_html(f: dict) -> str:
    d = f.get("first_divergence") or {}
    path = f.get("corpus_file") or "(not written)"
    commands = [f"parityfuzz repro {path}"]
    if f.get("exportable"):
        commands.append(f"parityfuzz export {path} -o repro.py && torchrun --nproc-per-node={f.get('world_size', 2)} "
                        "repro.py")
    extra = []
    if f.get("origin_description"):
        extra.append(f"<p>the mismatch {_e(f['origin_description'])}</p>")
    if f.get("known_issue"):
        extra.append(f"<p>known issue: {_e(f['known_issue'])}</p>")
    if f.get("duplicate_of"):
        extra.append(f"<p>already in the corpus as {_e(f['duplicate_of'])}</p>")
    found = (f"found after {f.get('cases_to_find', '?')} cases ({f.get('seconds_to_find', 0):.1f} s), shrunk in "
             f"{f.get('shrink_runs', 0)} runs; {'1-minimal' if f.get('one_minimal') else 'not shown 1-minimal'}")
    return (f'<div class="finding"><h3>{_e(f.get("target", ""))}: {_e(f.get("verdict_kind", ""))} '
            f'<span class="muted">{_e(f.get("case_id", ""))}</span></h3>'
            f'<p>{_e(f.get("description", ""))}</p>' + "".join(extra)
            + f'<p class="muted">{_e(found)}; first divergence: {_e(d.get("tensor", "-"))}</p>'
            + f'<pre>{_e(f.get("case_tree", ""))}</pre><pre>{_e(chr(10).join(commands))}</pre></div>')


def explained_html(explained: dict, seconds: dict | None = None, throttled: dict | None = None) -> str:
    """Failing cases that counted as passing, by what explained them (:func:`parityfuzz.triage.explain`), with the
    seconds they took; and the cases skipped for a known bug met often (:mod:`parityfuzz.engine.throttle`)."""
    seconds, throttled = seconds or {}, throttled or {}
    if not explained and not throttled:
        return ""
    skipped = {title: n for title, n in throttled.items()}
    labels = sorted(set(explained) | {f"known torch bug, {t}" for t in skipped}, key=lambda x: -explained.get(x, 0))
    rows = "".join(f'<tr><td class="l">{_e(label)}</td><td>{explained.get(label, 0)}</td>'
                   f'<td>{seconds.get(label, 0):.0f}</td>'
                   f'<td>{skipped.get(label.removeprefix("known torch bug, "), 0)}</td></tr>' for label in labels)
    return ('<h3>failures explained (counted as passing)</h3><table><tr><th class="l">explained by</th>'
            f"<th>cases</th><th>seconds</th><th>skipped once met often</th></tr>{rows}</table>")


def _rates(timing: dict) -> str:
    """A target's eager and compiled cases per minute (:func:`parityfuzz.engine.stats.timing`) as two cells."""
    eager, compiled = timing.get("eager", {}), timing.get("compiled", {})
    share = compiled.get("compile_share")
    return (f'<td>{eager.get("cases_per_minute") or "-"}</td><td>{compiled.get("cases_per_minute") or "-"}'
            + (f" ({share:.0%})" if share is not None else "") + "</td>")


def schedules_html(report: dict) -> str:
    """The run's schedule, or under pytest-xdist each worker's (over the group of targets it was dealt)."""
    return schedule_html(report.get("schedule")) + "".join(
        schedule_html(s, f" on worker {worker}") for worker, s in report.get("schedules", {}).items())


def schedule_html(schedule: dict | None, where: str = "") -> str:
    """How the run's schedule (:mod:`parityfuzz.engine.schedule`) shared the budget: each target's seconds, share,
    slices and last yield estimate, and why."""
    if not schedule or len(schedule.get("targets", {})) < 2:
        return ""
    how = ("adaptive: after one slice each, the next slice to the target expected to find the most new per second "
           "(new feature pairs by Good-Turing, near misses x5, failures x200), half the time spent evenly (the floor)"
           if schedule.get("adaptive") else "even: an equal share each, in turn")
    rows = "".join(f'<tr><td class="l">{_e(n)}</td><td>{t["seconds"]:.0f}</td><td>{t["share"]:.0%}</td>'
                   f'<td>{t["slices"]} ({t.get("best", 0)} best, {t.get("floor", 0)} floor)</td>'
                   f'<td>{t["yield_per_s"]:.2f}</td></tr>'
                   for n, t in schedule["targets"].items())
    return (f'<h2>schedule{_e(where)}</h2><p class="muted">{_e(how)}; {len(schedule.get("slices", []))} slices of up to '
            f'{schedule.get("slice_seconds", 0):.0f} s</p><table><tr><th class="l">target</th><th>s generating</th>'
            "<th>share</th><th>slices (for outlook, for floor)</th><th>outlook /s</th></tr>" + rows + "</table>")


def render(report: dict, title: str = "parityfuzz run") -> str:
    """The page for ``report`` (a ``--fuzz-report`` JSON object)."""
    verdicts = ", ".join(f"{n} {k}" for k, n in sorted(report["verdicts"].items())) or "none"
    head = (f"<h1>{_e(title)}</h1><p class=\"muted\">parityfuzz {_e(report.get('parityfuzz_version', '?'))}, torch "
            f"{_e(report.get('torch_version', '?'))}, fuzz seed {_e(report.get('fuzz_seed', '?'))} (rerun with "
            f"--fuzz-seed={_e(report.get('fuzz_seed', '?'))}), world sizes {_e(report.get('world_sizes', '?'))}</p>"
            f"<p><b>{report['cases_run']}</b> cases ({_e(verdicts)}), {report.get('generate_seconds', 0):.0f} s "
            f"generating, {report.get('shrink_seconds', 0):.0f} s shrinking; <b>{len(report['failures'])}</b> "
            "findings</p>")
    rows = "".join(
        f'<tr><td class="l"><a href="#t-{_e(n)}">{_e(n)}</a></td><td>{t.get("cases", 0)}</td>'
        + "".join(f'<td>{t.get("verdicts", {}).get(k, 0)}</td>' for k in VERDICT_COLOURS)
        + f'<td>{t.get("distinct_feature_combinations", 0)}</td><td>{t.get("generate_seconds", 0):.0f}</td>'
        + _rates(t.get("timing", {})) + f'<td>{len(t.get("failures", []))}</td></tr>' for n, t in report["targets"].items())
    table = ('<table><tr><th class="l">target</th><th>cases</th>' + "".join(f"<th>{k}</th>" for k in VERDICT_COLOURS)
             + "<th>feature combinations</th><th>s generating</th><th>eager cases/min</th>"
             "<th>compiled cases/min (share compiling)</th><th>findings</th></tr>" + rows + "</table>")
    sections = []
    for name, t in report["targets"].items():
        sections.append(
            f'<h2 id="t-{_e(name)}">{_e(name)}</h2><h3>cases per verdict over time</h3><p>{_legend()}</p>'
            + timeline_svg(t.get("timeline", [])) + explained_html(t.get("explained", {}),
                                                                t.get("explained_seconds"), t.get("throttled"))
            + "<h3>training-loop dimensions</h3>" + dimensions_html(t.get("dimensions"))
            + "<h3>seed tests' grids</h3>" + grids_html(t.get("seed_grids", {}))
            + "<h3>pairwise feature coverage</h3>" + heatmap_svg(t.get("feature_counts", {}), t.get("pair_counts", {})))
    findings = "".join(finding_html(f) for f in report["failures"]) or '<p class="muted">no findings</p>'
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>{head}{table}{schedules_html(report)}<h2>findings</h2>{findings}{''.join(sections)}"
            "</body></html>\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parityfuzz report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", metavar="RUN.json", help="a report written by --fuzz-report")
    parser.add_argument("-o", "--output", required=True, metavar="PATH", help="the HTML file to write")
    args = parser.parse_args(argv)
    try:
        report = load(args.run)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.output).write_text(render(report, title=f"parityfuzz run: {Path(args.run).name}"))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
