"""How a class is named inside an output key (`iou_<class>`, `f1_<class>`, ...).

Pure Python: `dslrun validate` names the outputs the same way the modelers do.
"""

from __future__ import annotations

import re
from typing import Any


def class_keys(num_classes: int, class_names: Any) -> list[str]:
    """Each class's name as a key part when the classes have usable names (letters, digits and
    `_`; other characters become `_`; distinct), else their indices `0` .. `K-1`."""
    if isinstance(class_names, list) and len(class_names) == num_classes:
        names = [re.sub(r"[^0-9A-Za-z_]+", "_", str(name)).strip("_") for name in class_names]
        if all(names) and len(set(names)) == len(names):
            return names
    return [str(k) for k in range(num_classes)]
