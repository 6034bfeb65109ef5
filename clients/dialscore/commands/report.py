"""`dialscore report RUN_DIR`: (re)write a run folder's self-contained HTML report.

    dialscore report runs/probe

reads the files the runs wrote in RUN_DIR (report.json or NAME.report.json, their rows, tables,
plots and, for probes, scores.jsonl) and writes RUN_DIR/report.html, plus compare-A-vs-B.html
beside each comparison; no service is contacted. Runs write report.html themselves when they
finish: this command rebuilds it (after `probe compare`, or from a run written by an older
client). The page works offline: styles, script, data and plots are inside it.
"""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    p = sub.add_parser("report", help="write a run folder's HTML report (report.html)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out folder of a finished run")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from dialscore.reporting.html_runs import write_report_html

    try:
        files = write_report_html(args.run_dir)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"dialscore report: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for path in files.values():
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0
