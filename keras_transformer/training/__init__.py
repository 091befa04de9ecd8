"""Training runs of the two applications.

Shared modules: `runs` (the run folder, resume, fit in the folder),
`callbacks`, `metrics`, `losses`, `schedules`, `compiling`, `batching`,
`distribute`, `settings` and `data_rules` (settings chosen from the data);
one package per task, `classifier` and `translator`; `run_export` exports a
run folder of either.
"""

from keras_transformer.training.callbacks import TimeBudget
from keras_transformer.training.classifier.evaluation import (
    classification_report,
    format_classification_report,
)
from keras_transformer.training.runs import RunFolder

__all__ = ["RunFolder", "TimeBudget", "classification_report", "format_classification_report"]
