"""The view models, one address for the rest of reporter: the report's
(render/report_view.py), the comparison's (render/compare_view.py) and the formatter
they share (render/fmt.py). A view decides nothing about the profile: it formats what
the analysis decided, and templates only loop and print.
"""

from __future__ import annotations

from .compare_view import CompareView, ModeView, compare_view
from .fmt import LANGUAGES, MAX_FORMATTED, Fmt, check_language, md_name, md_text
from .report_view import (MEMORY_NOTES, ReportView, SectionView, _finding_view, import_view,
                          run_view, section_view)

View = ReportView | CompareView

__all__ = ["LANGUAGES", "MAX_FORMATTED", "MEMORY_NOTES", "CompareView", "Fmt", "ModeView",
           "ReportView", "SectionView", "View", "_finding_view", "check_language",
           "compare_view", "import_view", "md_name", "md_text", "run_view", "section_view"]
