# Every install step lives here: `make demo` and `make test` work on a fresh
# machine with only Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: venv demo test test-tensorflow test-jax bench crosscheck clean

$(INSTALLED): requirements.txt
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip
	$(VENV_PYTHON) -m pip install --quiet -r requirements.txt
	touch $(INSTALLED)

venv: $(INSTALLED)

# The classifier end to end on the embedded BBC News corpus, with a short budget:
# vocabulary, training, test-split report, export, then the export loaded in a
# fresh process that classifies raw strings.
DEMO_TEXTS := "Shares in the carmaker rose after profits beat forecasts." \
	"The striker scored twice as the champions won the cup final." \
	"The band's new album tops the charts ahead of the awards." \
	"MPs will vote on the new immigration bill next week." \
	"The phone maker unveiled a faster chip for its laptops."

demo: venv
	$(VENV_PYTHON) -m apps.train_classifier --data bbc --max-examples 800 --epochs 4 \
		--time-budget 3 --verbose 2 --run-dir runs/demo-classifier --export-dir exported_models/classifier
	$(VENV_PYTHON) -m apps.predict exported_models/classifier $(DEMO_TEXTS)

crosscheck: venv
	$(VENV_PYTHON) -m apps.crosscheck

# The whole suite on TensorFlow, then the layers again on JAX (layers use keras.ops only).
test: test-tensorflow test-jax

test-tensorflow: venv
	KERAS_BACKEND=tensorflow $(VENV_PYTHON) -m pytest tests

test-jax: venv
	KERAS_BACKEND=jax $(VENV_PYTHON) -m pytest tests/layers

bench: venv
	$(VENV_PYTHON) benchmarks/layer_speed.py
	PYTHONPATH=. $(VENV_PYTHON) benchmarks/classifier_quality.py bbc

clean:
	rm -rf $(VENV) .pytest_cache
