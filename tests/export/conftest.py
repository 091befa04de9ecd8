"""Shares the session's trained and exported classifier (see tests/classifier_fixtures.py)."""

from tests.classifier_fixtures import trained_classifier  # noqa: F401  (a fixture)
