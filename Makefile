# Quick start: `make demo` runs the main job on the embedded default; `make test` runs the tests.
# Both create .venv when needed. torch is installed first, from the pinned CPU build, so that
# nothing later resolves a CUDA build of several GB; every other version comes from
# constraints.txt (the exact versions CI and the Docker image use).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP    := $(PY) -m pip install -q -c constraints.txt

.PHONY: install demo test test-fast serve standins bench loadtest clean

$(STAMP): pyproject.toml clients/pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e './clients[reports,evals]' -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/dialscore demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest

# The inner loop: everything but the tests marked slow (own apps, training, cluster, soak).
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m 'not slow'

serve: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/dialscore serve --config deployments/local.yaml

standins: $(STAMP)
	$(VENV)/bin/dialscore stand-ins build artifacts/stand-ins

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) loadtests/bench_engine.py

loadtest: $(STAMP)
	$(PIP) -e '.[load]'
	HF_HUB_OFFLINE=1 $(PY) loadtests/run_load.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
