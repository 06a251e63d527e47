# Highwater's two commands; each does everything on a fresh machine:
#   make demo   the changefeed on an embedded broker (broker, sample data, spark-submit, output)
#   make test   the whole suite: lint, types, JUnit, unit, Spark and integration tests
# Everything they need is installed by the targets below: system packages (Java, Maven) when
# missing, a virtualenv with the Python packages, and the JVM jars from Maven Central.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: demo test durations check docs jvm-test jars proto system clean bench bench-iceberg bench-scan cluster-bench soak cluster-test explore

demo: jars
	$(BIN)/highwater dev demo

# pytest on two workers, each with its broker, registry and Spark (a test file stays on one):
# most of a test's time is waiting on Kafka, Spark and the processes it kills, not a core.
# Tests marked soak are make soak's (each says which faster test holds its guarantee here).
SUITE = -n 2 --dist loadfile --no-loadscope-reorder -m "not soak"
test: check jvm-test
	$(BIN)/pytest $(SUITE)

# A full run timed per file into tests/durations.json: the suite takes the longest files first.
durations: jars
	bash -o pipefail -c '$(BIN)/pytest $(SUITE) --durations=0 -p no:cacheprovider | tee .durations.log'
	$(BIN)/python -m tests.support.durations .durations.log > tests/durations.json

# The JUnit tests of our Java (pipeline/jvm/walk), built against the installed pyspark's jars.
jvm-test: jars
	$(BIN)/highwater dev jvm-test

check: jars
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The docs site (MkDocs, Material) into site/: open site/index.html, nothing is fetched from the
# internet. Its reference pages are generated from the code (pipeline/dev/reference); make test
# builds it with --strict (tests/unit/test_docs_site.py).
docs: $(INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --site-dir site

jars: $(INSTALLED)
	$(BIN)/highwater dev fetch-jars

# The protobuf messages' Python module and stubs, from schemas/highwater_changefeed.proto
# (committed; tests/unit/test_protobuf.py fails while they differ from what this makes).
proto: $(INSTALLED)
	$(BIN)/python -m grpc_tools.protoc -I schemas --python_out=schemas --pyi_out=schemas schemas/highwater_changefeed.proto

# Two distributions, both editable: highwater-consumer (consumer/pyproject.toml: the consumer
# library and schemas, no Spark) and highwater, which requires it. Named in one pip command, the local
# consumer/ is what satisfies that requirement (no index has it).
$(INSTALLED): pyproject.toml consumer/pyproject.toml consumer/setup.py highwater_consumer/_rdbatch.c | system
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ./consumer -e '.[dev]'
	touch $(INSTALLED)

system:
	@scripts/ensure-system.sh

clean:
	rm -rf $(VENV) .jars .tools .highwater .pytest_cache .mypy_cache .ruff_cache site

# The changefeed benchmark (not part of `make test`): prints the numbers docs/benchmarks.md records.
bench: jars
	$(BIN)/python -m pipeline.dev.bench

# The benchmark on a local cluster (three Kafka nodes, Spark standalone with two workers):
# exactly once beside at least once (aborted transactions, lost tasks per 1,000 batches), then
# the throughput part there.
cluster-bench: jars
	$(BIN)/python -m pipeline.dev.bench --cluster

# The Iceberg applier's benchmark (also a part of `make bench`): windows of 5,000 changes/s into
# a table of 1M orders on the embedded catalog, then files per table before and after maintain;
# then the same windows applied by --engine spark (local[2]) on a REST catalog server.
bench-iceberg: jars
	$(BIN)/python -m pipeline.dev.bench_iceberg
	$(BIN)/python -m pipeline.dev.bench_iceberg_spark

# The initial-scan benchmark: a snapshot of 2.1M keys vs a plain Spark batch read-and-write.
bench-scan: jars
	$(BIN)/python -m pipeline.dev.bench_scan

# The chaos soak (not part of `make test`): the random workload under a steady producer, 20
# SIGKILLs of the driver and a broker restart, then the validator; prints its numbers and the
# duplicates per kill. Also two instances of one changefeed started at the same moment (one
# writer), and beside the native source two Debezium ones: PostgreSQL and MariaDB → Kafka
# Connect SIGKILLed 10 times while transactions are written, the changefeed killed too; and the
# tests marked soak (kill -9 at three points at least once: test_crash_safety.py).
soak: jars
	HIGHWATER_SOAK_KILLS=20 HIGHWATER_CONNECT_KILLS=10 $(BIN)/pytest tests/integration/test_chaos.py tests/integration/test_one_writer.py tests/integration/test_debezium_restarts.py tests/integration/test_mariadb.py tests/integration/test_crash_safety.py tests/integration/test_consumer_apply_iceberg_spark.py -s -p no:cacheprovider --timeout=3600

# New draws (not part of `make test`, whose draws are the same every run): the property tests
# with random examples (a failing one is kept in .hypothesis/ and replayed; pin it as an
# @example in its test) and the seeded integration tests with a new seed, printed by each.
explore: jars
	HIGHWATER_HYPOTHESIS=explore $(BIN)/pytest $(SUITE) tests/unit tests/spark tests/integration/test_chaos.py tests/integration/test_exactly_once.py -p no:cacheprovider

# The cluster tests (not part of `make test`): a three-node KRaft Kafka on loopback, nodes
# killed and restarted under a changefeed; exactly once, its output validated with no (key,
# updated) twice (HIGHWATER_SOAK_DELIVERY=at_least_once for the other mode).
cluster-test: jars
	HIGHWATER_CLUSTER_TESTS=1 $(BIN)/pytest tests/cluster -s -p no:cacheprovider --timeout=3600
