"""Shares the session's trained and exported classifier, and its export at Transformer weight 0
(see tests/classifier_fixtures.py)."""

from tests.classifier_fixtures import bag_alone_classifier, trained_classifier  # noqa: F401  (fixtures)
