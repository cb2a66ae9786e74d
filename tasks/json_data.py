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


def parse_json(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """The document's value, or JsonProblem saying why it cannot be read; with `unique_keys`, also when an object
    gives a key twice (json.loads keeps the last without a word)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs if unique_keys else None)
    except JsonProblem:
        raise
    except UnicodeDecodeError as e:
        raise JsonProblem(f"not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise JsonProblem(f"not JSON (line {e.lineno}: {e.msg})") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise JsonProblem(f"not JSON Mooring reads ({str(e).split(':')[0]})") from None
    except RecursionError:
        raise JsonProblem(f"nested more than about {sys.getrecursionlimit()} levels deep") from None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonProblem(f"key {key[:40]!r} given twice in one object; give each key once")
        out[key] = value
    return out
