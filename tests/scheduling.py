"""How `make test` spreads the tests over pytest-xdist workers (`-n 2 --dist loadgroup`).

The unit of scheduling is a group, run whole by one worker:

* the test files that share one session-scoped artifact (a trained model, an
  export) form one group, so the artifact is built once rather than once per
  worker (tests/test_scheduling.py checks that no file using one is left out);
* every other test file is a group of its own, so its module-scoped fixtures
  are built once too.

The longest groups start first, which keeps the two workers' ends close.

The groups are chosen here, from the file in each test id, rather than with
`xdist_group` marks: pytest-xdist 3.8 passes those marks by rewriting node ids,
which pytest 9.2 ignores (pytest-dev/pytest-xdist#1386).
"""

import pytest

# Test file -> group, for the files that share a session-scoped artifact.
SHARED_GROUPS = {
    # build_translator (tests/export/test_translator_export.py)
    "tests/export/test_translator_export.py": "tiny_translator",
    "tests/apps/test_translate.py": "tiny_translator",
    "tests/export/test_litert_translator.py": "tiny_translator",
    "tests/export/test_onnx_translator_export.py": "tiny_translator",
    "tests/export/test_quantize_translator.py": "tiny_translator",
    # translator_runs (tests/apps/translator_runs.py)
    "tests/apps/test_tokenize_app.py": "translator_runs",
    "tests/apps/test_train_translator.py": "translator_runs",
    # trained_classifier, budget_classifier (tests/classifier_fixtures.py)
    "tests/apps/test_export_app.py": "trained_classifier",
    "tests/apps/test_predict.py": "trained_classifier",
    "tests/apps/test_predict_process.py": "trained_classifier",
    "tests/apps/test_train_classifier.py": "trained_classifier",
    "tests/export/test_classifier_export.py": "trained_classifier",
    "tests/export/test_bag_alone_export.py": "trained_classifier",
    "tests/export/test_litert_export.py": "trained_classifier",
    "tests/export/test_onnx_export.py": "trained_classifier",
    "tests/export/test_quantize.py": "trained_classifier",
    # embedding_export (tests/embedding_fixtures.py)
    "tests/apps/test_embed_app.py": "embedding_export",
    "tests/export/test_embed_export.py": "embedding_export",
    "tests/serving/test_embed_serving.py": "embedding_export",
    # exports, and direct_models / direct_answers built on it (tests/serving/conftest.py;
    # tests/browser/conftest.py shares the same build, tests/serving/serving_helpers.py)
    "tests/browser/test_explorer_browser.py": "serving_exports",
    "tests/serving/test_app.py": "serving_exports",
    "tests/serving/test_classify.py": "serving_exports",
    "tests/serving/test_connections.py": "serving_exports",
    "tests/serving/test_edge_strings.py": "serving_exports",
    "tests/serving/test_explorer.py": "serving_exports",
    "tests/serving/test_fuzz.py": "serving_exports",
    "tests/serving/test_grpc.py": "serving_exports",
    "tests/serving/test_load.py": "serving_exports",
    "tests/serving/test_metrics.py": "serving_exports",
    "tests/serving/test_overload.py": "serving_exports",
    "tests/serving/test_release.py": "serving_exports",
    "tests/serving/test_shutdown.py": "serving_exports",
    "tests/serving/test_signatures.py": "serving_exports",
    "tests/serving/test_tf_serving_command_line.py": "serving_exports",
    "tests/serving/test_translate_controls.py": "serving_exports",
    "tests/serving/test_warmup.py": "serving_exports",
    "tests/export/test_warmup_requests.py": "serving_exports",
}

# The session-scoped fixtures behind those groups: fixture name -> group.
SHARED_FIXTURES = {
    "tiny_translator": "tiny_translator",
    "translator": "tiny_translator",  # tests/apps/test_translate.py, through build_translator
    "trained_classifier": "trained_classifier",
    "budget_classifier": "trained_classifier",
    "bag_alone_classifier": "trained_classifier",  # a copy of its run, exported at weight 0
    "translator_runs": "translator_runs",
    "exports": "serving_exports",
    "api_server": "serving_exports",  # real servers on the exports (tests/serving/conftest.py)
    "explorer_server": "serving_exports",
    "embedding_export": "embedding_export",
    "embedding_saved_model": "embedding_export",
}

# Groups of 15 seconds or more on two cores, longest first (measured with
# `--durations`, setup included); the other groups follow in pytest-xdist's
# order (most tests first). A long group that starts last keeps its worker
# running alone after the other has finished.
LONGEST_FIRST = [
    "serving_exports",
    "trained_classifier",
    "tests/test_packaging.py",
    "tests/training/test_data_parallel.py",
    "tests/apps/test_export_jax_runs.py",
    "tests/apps/test_train_classifier_pretrained.py",
    "tests/apps/test_hardware_flags.py",
    "tests/training/test_without_tensorflow.py",
    "tests/keras_suite/test_keras_multi_head_attention.py",
    "tiny_translator",
    "translator_runs",
    "embedding_export",
    "tests/text/test_python_tokenizer.py",
    "tests/training/test_pretraining.py",
    "tests/training/test_data_rules.py",
    "tests/apps/test_multi_worker.py",
    "tests/layers/test_crosscheck.py",
    "tests/training/test_translation_selection.py",
    "tests/training/test_shared_vocabulary.py",
    "tests/layers/test_mixed_precision.py",
    "tests/test_decode_loop.py",
    "tests/apps/test_search.py",
    "tests/test_decoding.py",
    "tests/models/test_models_attention_class.py",
    "tests/training/test_bag_of_ngrams_combination.py",
    "tests/models/test_classifier.py",
    "tests/training/test_model_selection.py",
]


def scheduling_group(nodeid):
    """The group of a test id: its shared-artifact group, else its file."""
    path = nodeid.split("::", 1)[0]
    return SHARED_GROUPS.get(path, path)


class GroupSchedulingPlugin:
    """Makes `--dist loadgroup` schedule by `scheduling_group`."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class GroupScheduling(LoadScopeScheduling):
            _ordered = False

            def _split_scope(self, nodeid):
                return scheduling_group(nodeid)

            def _assign_work_unit(self, node):
                if not self._ordered:  # the queue is complete by the first call
                    self._ordered = True
                    rank = {group: index for index, group in enumerate(LONGEST_FIRST)}
                    for group in sorted(
                        self.workqueue, key=lambda group: rank.get(group, len(rank))
                    ):
                        self.workqueue.move_to_end(group)
                return super()._assign_work_unit(node)

        return GroupScheduling(config, log)
