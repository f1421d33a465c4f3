"""trainmem's result keys, as common/results/result_schema.json declares them once for the C++
side (which is generated from it) and for the report (which loads it here).

    CATEGORIES                 the memory categories, in trainmem's order
    PEAK_ALLOCATED, PEAK_RESERVED, ALLOCATED, RESERVED
                               the memory figures' keys ("peak_allocated_bytes", ...)
    category_peak_counter(c)   a benchmark's counter for category c's peak ("activations_peak_bytes")
    rate_counter(what), amount_counter(what)
                               "tokens_per_s" and "tokens_per_iteration"
    STEP_FIELDS                the fields of one training step in `trainmem train --json`
"""
from __future__ import annotations

import json
import pathlib

SCHEMA_FILE = pathlib.Path(__file__).resolve().parents[2] / "common" / "results" / "result_schema.json"
_SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
_MEMORY, _RATES = _SCHEMA["memory"], _SCHEMA["rates"]

CATEGORIES: tuple[str, ...] = tuple(c["name"] for c in _SCHEMA["memory_categories"])
CATEGORY_HOLDS: dict[str, str] = {c["name"]: c["holds"] for c in _SCHEMA["memory_categories"]}

PEAK_ALLOCATED: str = _MEMORY["peak_allocated"]
PEAK_RESERVED: str = _MEMORY["peak_reserved"]
ALLOCATED: str = _MEMORY["allocated"]
RESERVED: str = _MEMORY["reserved"]
BY_CATEGORY: str = _MEMORY["by_category"]
CATEGORY_CURRENT: str = _MEMORY["category_current"]
CATEGORY_PEAK: str = _MEMORY["category_peak"]

STEP_FIELDS: tuple[str, ...] = tuple(_SCHEMA["step"]["fields"])


def category_peak_counter(category: str) -> str:
    return category + _MEMORY["category_peak_counter_suffix"]


def rate_counter(what: str) -> str:
    return what + _RATES["rate_suffix"]


def amount_counter(what: str) -> str:
    return what + _RATES["amount_suffix"]
