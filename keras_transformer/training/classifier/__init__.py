"""Training the text classifier.

`pipeline` (`train_classifier`), its `settings` (`ClassifierSettings`), its
`data_rules` (settings chosen from the training texts), `tokenizing`,
`model`, the `bag_of_ngrams` fitted beside the Transformer, `pretraining`,
`search` (KerasTuner) and `evaluation` (the classification report).
"""
