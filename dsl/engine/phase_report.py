"""What a modeler reports of an evaluation beyond its scalar metrics, and where it goes.

A scalar per metric is what the loop reduces, prints and monitors; a classifier's reader
also wants a table per class and the confusion matrix. A modeler may offer, each optional:

- `report(metrics)`: a JSON-able dict from its metrics' state. The runner has it made while
  the metrics hold the sums of every rank (metric_reduction's `while_summed`), so the
  report of N ranks is the report one process computes on the same data.
- `report_outputs(report)`: flat numbers for the phase's record in the metrics file
  (a classifier's `f1_<class>`, ...), so a per-epoch plot reads them like any metric;
  they are no phase outputs (not printed, not monitored). {} keeps records lean.
- `write_report(report, folder, mode, title)`: the report drawn for a person — files in
  `folder` (the run directory) and summaries in the default TensorBoard writer; returns
  {what: path}. Only the chief calls it.
- `report_warnings(report)`: what the report shows is wrong, in words (a classifier whose
  predictions (nearly) all fall in one class); said on the chief, once when two val phases in a
  row show it, and when the run's last one does: the first val phase of a healthy run often shows a
  young network predicting one class (a new user learned to ignore the warning there).

Nothing here knows a task: the report goes from the modeler to the record, the run
directory and TensorBoard as it is.
"""

from __future__ import annotations

from typing import Any


class PhaseReport:
    """The modeler's report of the last evaluation (None until one, or when it offers none)."""

    def __init__(self, modeler: Any) -> None:
        self.modeler = modeler
        self.last: dict[str, Any] | None = None
        self.warned = False
        self.warned_before = False  # whether the val phase before this one showed a warning

    def take(self, metrics: dict[str, Any]) -> None:
        """Make the report of the pass `metrics` counted (call while they hold every rank's sums)."""
        report = getattr(self.modeler, "report", None)
        self.last = report(metrics) if report is not None else None

    def outputs(self) -> dict[str, float]:
        """The report's flat values for a record of the metrics file ({} without a report)."""
        values = getattr(self.modeler, "report_outputs", None)
        return dict(values(self.last)) if self.last and values is not None else {}

    def write(self, runner: Any, mode: str, writer: str, step: int, title: str) -> dict[str, str]:
        """Files beside the metrics file and TensorBoard summaries (in `writer`'s directory) of
        the report at `step`, on the chief; {what: path} of the files."""
        write = getattr(self.modeler, "write_report", None)
        if not self.last or write is None or not runner.placement.is_chief:
            return {}
        summaries = runner.summary_writer(writer)
        with summaries.as_default(step=step):
            written: dict[str, str] = write(self.last, runner.model_dir, mode, title)
        summaries.flush()
        return written

    def finish(self, runner: Any, mode: str) -> dict[str, float]:
        """At the end of a val phase: the report drawn (chief) and its values for the record."""
        if mode != "val":
            return {}
        self.write(runner, "val", "val", runner.step, f"val, step {runner.step}")
        warnings = getattr(self.modeler, "report_warnings", None)
        if self.last and warnings is not None and runner.placement.is_chief:
            texts = warnings(self.last)
            last = _last_phase(runner)
            # Said once when it persists (a young network's first phase often shows it), and again
            # when it ends the run: the end is what the run leaves (trial B14 heard of it at step 12 only).
            if texts and (last or (self.warned_before and not self.warned)):
                again = " (still, at the run's end)" if self.warned and last else ""
                for text in texts:
                    runner.notice(f"warning: val, step {runner.step}{again}: {text}")
                self.warned = True
            self.warned_before = bool(texts)
        return self.outputs()


def _last_phase(runner: Any) -> bool:
    """Whether the val phase that just ended is the run's last (its length reached)."""
    if getattr(runner, "max_epochs", None) is not None:
        return bool(runner.epoch >= runner.max_epochs)
    return getattr(runner, "max_iters", None) is not None and runner.step >= runner.max_iters
