"""Markdown reports in the shape of the paper's Tables 3–7 and its §3.7 wire-cost study.

Built from the artifacts alone (``metrics``), so a report is rebuilt without rerunning and two
builds of the same artifacts are byte-identical. A table whose runs are absent is replaced by a
one-line note; every table names the planners that are simulated.

One module per job: ``markup`` (formats, the pipe table, sections), ``ladder`` (Tables 3 and 6,
events, the terminal ladder), ``classes`` (Tables 4 and 7), ``policies`` (Table 5), ``cost`` (§3.7
wire cost, what the model is shown) and ``page`` (the document, ``build_report``).
"""

from __future__ import annotations

from .classes import FUNDING, NEGATIVE_CONTROL, NO_CONSTRAINT, SHAPE_NAMES, table4, table7
from .cost import PAPER_WIRE, model_view_table, wire_table
from .ladder import compliance_caption, events_table, ladder_table, table3, table6
from .markup import DASH, SIMULATED_NOTE, markdown_table
from .page import build_report, render_report, unfinished_runs
from .policies import POLICY_NAMES, TABLE5_ORDER, table5

__all__ = [
    "DASH",
    "FUNDING",
    "NEGATIVE_CONTROL",
    "NO_CONSTRAINT",
    "PAPER_WIRE",
    "POLICY_NAMES",
    "SHAPE_NAMES",
    "SIMULATED_NOTE",
    "TABLE5_ORDER",
    "build_report",
    "compliance_caption",
    "events_table",
    "ladder_table",
    "markdown_table",
    "model_view_table",
    "render_report",
    "table3",
    "table4",
    "table5",
    "table6",
    "table7",
    "unfinished_runs",
    "wire_table",
]
