"""Training the translator.

`pipeline` (`train_translator`), its `settings` (`TranslatorSettings`), its
`data_rules` (settings chosen from the training pairs), `tokenizing` (the
run's vocabularies), `model` and `chrf` (chrF of the translations, every
epoch).
"""
