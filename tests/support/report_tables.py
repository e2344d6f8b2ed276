"""The HTML report read back as data: tables by id, cells by their ``data-field``, images and
links, so that tests compare the numbers a person reads with the run's own files."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Tables by id: rows of ``(tr attrs, [(td attrs, text), ...])``; img tags; all hrefs/srcs."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: dict[str, list] = {}
        self.imgs: list[dict] = []
        self.links: list[str] = []
        self._tid = self._row = self._cell = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("href", "src"):
            if k in a:
                self.links.append(a[k])
        if tag == "table":
            self._tid = a.get("id")
            self.tables.setdefault(self._tid, [])
        elif tag == "tr" and self._tid is not None:
            self._row = (a, [])
        elif tag == "td" and self._row is not None:
            self._cell = [a, ""]
        elif tag == "img":
            self.imgs.append(a)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self._row[1].append(tuple(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row[1]:
                self.tables[self._tid].append(self._row)
            self._row = None
        elif tag == "table":
            self._tid = None

    def fields(self, table_id: str) -> list[tuple[dict, dict[str, tuple[dict, str]]]]:
        """The rows of table ``table_id``: ``(tr attrs, {data-field: (td attrs, text)})``."""
        return [
            (ra, {c[0]["data-field"]: c for c in cells if "data-field" in c[0]})
            for ra, cells in self.tables[table_id]
        ]
