# Quick start: `make demo` runs the main job on the embedded default; `make test` runs the tests.
# Both create .venv when needed. torch is installed first, from the pinned CPU build, so that
# nothing later resolves a CUDA build of several GB; every other version comes from
# constraints.txt (the exact versions CI and the Docker image use).
#
# `make test` also creates .venv-client, where only the client is installed (its extras, pytest
# and jsonschema), and runs tests/client there: the client's tests need nothing of the server.
# The client is installed as a user installs it (not editable), again whenever its files change.
#
# The browser tests of report.html (tests/service/test_report_browser.py) need the Debian package
# chromium: the .venv recipe installs it when it is missing and make runs as root with apt-get.
# So does it redis-server, which the GCS fault-tolerance test (tests/cluster/test_gcs_loss.py)
# starts on a loopback port of its own; without it that test skips, naming redis-server.
# The container image's test (tests/deploy/test_image.py) builds and runs the image with Podman:
# the same recipe installs podman, runc (its runtime here), mmdebstrap (the stand-in base) and
# iproute2 (ss) the same way; without them that test skips, naming the package.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP    := $(PY) -m pip install -q -c constraints.txt
CLIENT_VENV  ?= .venv-client
CLIENT_PY    := $(CLIENT_VENV)/bin/python
CLIENT_STAMP := $(CLIENT_VENV)/.installed
CLIENT_FILES := $(shell find clients -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -not -path 'clients/build/*')

.PHONY: install demo test test-client test-fast serve standins bench loadtest record-contract clean

$(STAMP): pyproject.toml clients/pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e './clients[reports,evals]' -e '.[test]'
	@# The report's browser tests drive the system Chromium through Playwright (in .[test]); no
	@# browser is downloaded. Best effort, as root with apt-get only: they skip without it.
	-command -v chromium >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| (apt-get update -q && apt-get install -y -q chromium) || true
	-command -v redis-server >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| (apt-get update -q && apt-get install -y -q redis-server) || true
	-(command -v podman && command -v runc && command -v mmdebstrap && command -v ss) >/dev/null \
		|| ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] \
		|| (apt-get update -q && apt-get install -y -q podman runc mmdebstrap iproute2) || true
	touch $(STAMP)

$(CLIENT_STAMP): $(CLIENT_FILES) constraints.txt
	test -x $(CLIENT_PY) || $(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_PY) -m pip install -q --upgrade pip
	rm -rf clients/build  # setuptools builds in place: a module deleted since must not ship
	$(CLIENT_PY) -m pip install -q -c constraints.txt './clients[reports,evals]' pytest pytest-timeout jsonschema
	touch $(CLIENT_STAMP)

install: $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/dialscore demo

# Everything but the client's tests, listing the 30 slowest (setup included) so that a CI log
# shows where the run's time goes; beside it, in the background, the client's install and tests
# (test-client), whose log follows the server's. The run fails if either fails.
test: $(STAMP)
	@mkdir -p artifacts
	$(MAKE) --no-print-directory test-client > artifacts/test-client.log 2>&1 & client=$$!; \
	HF_HUB_OFFLINE=1 $(PY) -m pytest --ignore=tests/client --durations=30; server=$$?; \
	wait $$client; client=$$?; \
	echo "== the client's install and tests (artifacts/test-client.log) =="; \
	cat artifacts/test-client.log; \
	echo "server tests: exit $$server; client tests: exit $$client"; \
	[ $$server = 0 ] && [ $$client = 0 ]

# The client's tests where only the client is installed (run from tests/: the repository root
# holds the server's editable-install metadata, which Python would see from there).
test-client: $(CLIENT_STAMP)
	cd tests && HF_HUB_OFFLINE=1 DIALSCORE_CLIENT_ONLY=1 $(CURDIR)/$(CLIENT_PY) -m pytest client

# The inner loop: everything but the tests marked slow (own apps, training, cluster, soak).
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m 'not slow'

# Rewrite tests/contract/ (the client tests' snapshot of the API) from the live app; review the
# diff and commit it. Never run by CI.
record-contract: $(STAMP)
	DIALSCORE_RECORD_CONTRACT=1 HF_HUB_OFFLINE=1 $(PY) -m pytest tests/service/test_contract_snapshot.py

serve: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/dialscore serve --config deployments/local.yaml

standins: $(STAMP)
	$(VENV)/bin/dialscore stand-ins build artifacts/stand-ins

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m loadtests.bench_engine

loadtest: $(STAMP)
	$(PIP) -e '.[load]'
	HF_HUB_OFFLINE=1 $(PY) -m loadtests.run_load

clean:
	rm -rf $(VENV) $(CLIENT_VENV) artifacts .pytest_cache
