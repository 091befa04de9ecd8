"""BLEU and chrF of translations against one reference each: the translator's test score.

Both come from sacrebleu where it is installed (its defaults: cased, one
reference, BLEU on its 13a tokenization), with the signature that says how
each was computed. Without sacrebleu, chrF is `corpus_chrf` (sacrebleu's
definition, checked against it in the tests) and there is no BLEU: the
project has none of its own, and a BLEU computed any other way would not
compare with published ones.
"""

from keras_transformer.training.translator.chrf import corpus_chrf

OWN_CHRF = "keras_transformer.training.translator.chrf.corpus_chrf (sacrebleu's chrF definition)"
NO_BLEU = "none: sacrebleu is not installed (pip install sacrebleu)"


def corpus_scores(hypotheses, references):
    """BLEU and chrF (0-100) of `hypotheses` against `references` (lists of str, one each).

    Returns:
        A dict: `bleu` (float, or None without sacrebleu), `chrf` (float),
        `bleu_scorer` and `chrf_scorer` (what computed each: a sacrebleu
        signature, or the fallback said in words).
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"Scoring needs one reference per translation: got {len(hypotheses)} translations "
            f"and {len(references)} references."
        )
    try:
        import sacrebleu
    except ImportError:
        return {
            "bleu": None,
            "chrf": round(corpus_chrf(hypotheses, references), 2),
            "bleu_scorer": NO_BLEU,
            "chrf_scorer": OWN_CHRF,
        }
    bleu, chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "bleu_scorer": f"sacrebleu BLEU {bleu.get_signature()}",
        "chrf_scorer": f"sacrebleu chrF {chrf.get_signature()}",
    }
