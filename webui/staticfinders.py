"""Serve plotly.js from the installed plotly package as the static file `plotly/plotly.min.js`.

The package's data folder also holds data sets and a widget bundle we do not want collected, so this finder
exposes exactly one file, at the version pinned in requirements.txt.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS = "plotly/plotly.min.js"
PACKAGE_DATA = Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyJSFinder(BaseFinder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PACKAGE_DATA))
        self.storage.prefix = "plotly"  # collectstatic puts the file under STATIC_ROOT/plotly/

    def check(self, **kwargs) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs):
        find_all = find_all or kwargs.get("all", False)
        found = str(PACKAGE_DATA / "plotly.min.js") if path == PLOTLY_JS else None
        if find_all:
            return [found] if found else []
        return found or []

    def list(self, ignore_patterns) -> Iterator[tuple[str, FileSystemStorage]]:
        yield "plotly.min.js", self.storage
