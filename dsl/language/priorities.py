"""A callback's `priority:`, named as MMEngine names its hook priorities (HIGHEST 0 ... LOWEST 100).

The registry adds this parameter to every callback's schema, so it lives in the language; the
engine's hook base class sorts by it.
"""

from __future__ import annotations

from typing import Any

PRIORITIES: dict[str, int] = {
    "HIGHEST": 0,
    "VERY_HIGH": 10,
    "HIGH": 30,
    "ABOVE_NORMAL": 40,
    "NORMAL": 50,
    "BELOW_NORMAL": 60,
    "LOW": 70,
    "VERY_LOW": 90,
    "LOWEST": 100,
}

PRIORITY_PARAM: dict[str, Any] = {
    "description": (
        "When this callback runs relative to the others at each hook point: a name "
        "(HIGHEST, VERY_HIGH, HIGH, ABOVE_NORMAL, NORMAL, BELOW_NORMAL, LOW, VERY_LOW, LOWEST) "
        "or 0-100, lower first. Omit to use the callback's own default."
    ),
    "anyOf": [
        {"type": "string", "enum": list(PRIORITIES)},
        {"type": "integer", "minimum": 0, "maximum": 100},
        {"type": "null"},
    ],
    "default": None,
}


