# Quick start: `make demo` runs the main job on the embedded default; `make test` runs the tests.
# Both create .venv when needed. torch is installed first, from the pinned CPU build, so that
# nothing later resolves a CUDA build of several GB.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test serve standins bench loadtest clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/dialscore demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest

serve: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/serve run deployments/local.yaml

standins: $(STAMP)
	$(VENV)/bin/dialscore stand-ins build artifacts/stand-ins

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) loadtests/bench_engine.py

loadtest: $(STAMP)
	$(PY) -m pip install -q -e '.[load]'
	HF_HUB_OFFLINE=1 $(PY) loadtests/run_load.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
