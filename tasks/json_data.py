"""JSON read as plain data, every way a document can fail to parse said in one line.

`json.loads` raises JSONDecodeError for bad syntax, but a plain ValueError for an integer of more than 4,300
digits and a RecursionError for arrays or objects nested deeper than the interpreter's recursion limit (a file
of 100,000 `[` is short). The callers (traces, LEAF files, a run's records, the claims' histories) name the file.
"""
from __future__ import annotations

import json
import sys
from typing import Any


class JsonProblem(ValueError):
    """A document that is not JSON Mooring can read; the message is one line without the file's name."""


def parse_json(text: str | bytes) -> Any:
    """The document's value, or JsonProblem saying why it cannot be read."""
    try:
        return json.loads(text)
    except UnicodeDecodeError as e:
        raise JsonProblem(f"not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise JsonProblem(f"not JSON (line {e.lineno}: {e.msg})") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise JsonProblem(f"not JSON Mooring reads ({str(e).split(':')[0]})") from None
    except RecursionError:
        raise JsonProblem(f"nested more than about {sys.getrecursionlimit()} levels deep") from None
