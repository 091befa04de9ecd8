"""`corpus_scores`: the translator's test score, with sacrebleu and without it."""

import sys

import pytest

from keras_transformer.training.translator.chrf import corpus_chrf
from keras_transformer.training.translator.scoring import corpus_scores

HYPOTHESES = ["The cat sat on the mat.", "A dog barks loudly", "Hello , world !"]
REFERENCES = ["The cat sat on the mat.", "The dog barks loudly.", "Hello, world!"]


def test_with_sacrebleu_both_scores_are_sacrebleus_defaults():
    sacrebleu = pytest.importorskip("sacrebleu")  # requirements.txt pins it
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    expected_bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], tokenize="13a").score
    assert scores["bleu"] == pytest.approx(expected_bleu, abs=0.005)
    assert 0 < scores["bleu"] < 100
    assert scores["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score, abs=0.005
    )
    assert "case:mixed" in scores["bleu_scorer"] and "tok:13a" in scores["bleu_scorer"]
    # Cased: lower-casing the hypotheses costs BLEU.
    lowered = corpus_scores([text.lower() for text in HYPOTHESES], REFERENCES)
    assert lowered["bleu"] < scores["bleu"]


def test_without_sacrebleu_chrf_is_ours_and_bleu_is_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # import sacrebleu raises ImportError
    scores = corpus_scores(HYPOTHESES, REFERENCES)
    assert scores["bleu"] is None
    assert "not installed" in scores["bleu_scorer"]
    assert scores["chrf"] == round(corpus_chrf(HYPOTHESES, REFERENCES), 2)
    assert "corpus_chrf" in scores["chrf_scorer"]


def test_a_missing_reference_is_refused():
    with pytest.raises(ValueError, match="one reference per translation: got 3 translations"):
        corpus_scores(HYPOTHESES, REFERENCES[:2])
