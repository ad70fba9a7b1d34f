# One command to run the server, one to run the tests; both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install proto bench clean

run: $(STAMP)  ## Run the server on the embedded PostgreSQL (or OFFSETSTORE_DATABASE_URL).
	$(VENV)/bin/offsetstore serve

test: $(STAMP)  ## Run the whole test suite (starts its own embedded PostgreSQL).
	$(PY) -m pytest $(PYTEST_ARGS)

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

proto: $(STAMP)  ## Regenerate the committed gRPC code from proto/.
	$(PY) scripts/gen_proto.py

bench: $(STAMP)  ## Commit-throughput benchmark against the embedded PostgreSQL.
	$(PY) bench/commit_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info
