"""Training helpers: callbacks, the run folder, evaluation reports, and the
classifier's training pipeline (`keras_transformer.training.classifier`)."""

from keras_transformer.training.callbacks import RunFolder, TimeBudget
from keras_transformer.training.evaluation import (
    classification_report,
    format_classification_report,
)

__all__ = ["RunFolder", "TimeBudget", "classification_report", "format_classification_report"]
