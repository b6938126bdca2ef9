"""Which way an output is better, for the settings that say `auto` (a checkpoint's `save_best.mode`,
`early_stopping.mode`, a sweep's `goal`): one answer for all three.

A score is better high: accuracy-like outputs (accuracy, auc, precision, recall, f1, iou), a
detector's mAP and per-class AP (`map`, `map_50`, `ap_<class>`) and BLEU. Anything else — a loss,
an error — is better low. Trial A13's detector kept its worst checkpoint as best and its sweep
reported a diverged trial as the best one: `map` was not on the list each setting kept apart.

Pure Python: `dslrun validate` and the sweep's report read this without TensorFlow.
"""

from __future__ import annotations

import re

# Words a higher-is-better output's name contains anywhere ("top_5_accuracy", "mean_iou").
HIGHER_IS_BETTER = ("accuracy", "acc", "auc", "precision", "recall", "f1", "iou")
# Words that are higher-is-better only as a whole part of the name ("map_50", "ap_zero", "bleu").
SCORE_PARTS = ("map", "ap", "bleu")
AUTO_DESCRIPTION = ("max for scores (accuracy, auc, precision, recall, f1, iou, map and per-class ap, bleu), "
                    "min otherwise (a loss)")


def better(output: str) -> str:
    """"max" or "min": the direction in which `output` (`val/map_50`, or `map_50`) improves."""
    name = output.rpartition("/")[2].lower()
    parts = re.split(r"[^a-z0-9]+", name)
    if "loss" in parts or "error" in parts:
        return "min"
    if any(word in name for word in HIGHER_IS_BETTER) or any(part in SCORE_PARTS for part in parts):
        return "max"
    return "min"
