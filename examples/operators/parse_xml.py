"""Parse XML (Sec. 5.2): a single-pass SAX parse of an in-memory XML document per tuple.

The document is a small sensor-observation message (about 4 KB, 60 readings), built once in
``setup``; each tuple parses it with ``xml.sax`` and counts elements and characters, the kind
of work a first task does to turn wire messages into records. CPU and memory bound.
"""

from __future__ import annotations

import xml.sax


def make_document(readings: int = 60) -> bytes:
    rows = "".join(
        f'<reading id="{i}" sensor="meter-{i % 7}" unit="kWh"><ts>2016-05-06T10:{i % 60:02d}:00Z</ts>'
        f"<value>{i * 1.37:.3f}</value></reading>"
        for i in range(readings)
    )
    return f'<?xml version="1.0"?><observations source="grid">{rows}</observations>'.encode()


class _Counter(xml.sax.ContentHandler):
    def __init__(self) -> None:
        super().__init__()
        self.elements = 0
        self.chars = 0

    def startElement(self, name, attrs):
        self.elements += 1

    def characters(self, content):
        self.chars += len(content)


class ParseXml:
    name = "parse_xml"

    def __init__(self, readings: int = 60):
        self.readings = readings
        self.document = b""

    def setup(self) -> None:
        self.document = make_document(self.readings)

    def process(self, key: int) -> int:
        handler = _Counter()
        xml.sax.parseString(self.document, handler)
        return handler.elements

    def close(self) -> None:
        pass
