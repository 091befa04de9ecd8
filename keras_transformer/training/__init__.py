"""Training helpers: evaluation reports (schedule, losses and callbacks to come)."""

from keras_transformer.training.evaluation import classification_report
from keras_transformer.training.evaluation import format_classification_report
