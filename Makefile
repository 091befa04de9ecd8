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

demo: venv
	$(VENV_PYTHON) -m apps.crosscheck

crosscheck: demo

# The whole suite on TensorFlow, then the layers again on JAX (layers use keras.ops only).
test: test-tensorflow test-jax

test-tensorflow: venv
	KERAS_BACKEND=tensorflow $(VENV_PYTHON) -m pytest tests

test-jax: venv
	KERAS_BACKEND=jax $(VENV_PYTHON) -m pytest tests/layers

bench: venv
	$(VENV_PYTHON) benchmarks/layer_speed.py

clean:
	rm -rf $(VENV) .pytest_cache
