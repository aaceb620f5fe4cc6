# The two commands a user needs are `make run` and `make test`. Every target first
# creates or refreshes .venv from pyproject.toml, so nothing installed by hand is relied on.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: run run-orders test lint compile typecheck unit bench serve clean check-python check-java check-zookeeper check-chromium check-kcat check-postgresql check-node kafkajs venv

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || { \
	  echo "error: Onceflow needs Python 3.11 or newer as '$(PYTHON)' (set PYTHON=/path/to/python3.11)." >&2; exit 1; }

$(STAMP): pyproject.toml | check-python
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# src/'s bytecode, written ahead and refreshed where a file changed: where
# PYTHONDONTWRITEBYTECODE is set, no process writes it, and every broker, CLI and Spark
# worker the suite starts would compile the package again (about 0.4 s of CPU each).
compile: $(STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null

check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: the Spark connector and its tests need Java 17 on PATH (install a JDK 17)." >&2; exit 1; }

# A cluster's metadata lives in ZooKeeper (Debian's package): installed where we may (as
# root, with apt-get), otherwise a clear message says what to install.
ZOOKEEPER_JAR ?= /usr/share/java/zookeeper.jar
ZOOKEEPER_USER = the cluster tests need
check-zookeeper:
	@test -f $(ZOOKEEPER_JAR) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing ZooKeeper (Debian package zookeeper)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper >/dev/null; }; \
	  fi; }
	@test -f $(ZOOKEEPER_JAR) || { \
	  echo "error: $(ZOOKEEPER_USER) ZooKeeper ($(ZOOKEEPER_JAR)): install Debian's 'zookeeper' package (sudo apt-get install zookeeper) or set ZOOKEEPER_JAR." >&2; exit 1; }

# The console's browser tests drive Debian's headless Chromium through its chromedriver:
# installed where we may (as root, with apt-get), otherwise a clear message says what to install.
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
check-chromium:
	@test -x $(CHROMIUM) -a -x $(CHROMEDRIVER) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Chromium (Debian packages chromium and chromium-driver)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	  fi; }
	@test -x $(CHROMIUM) -a -x $(CHROMEDRIVER) || { \
	  echo "error: the console's browser tests need Chromium ($(CHROMIUM)) and chromedriver ($(CHROMEDRIVER)): install Debian's 'chromium' and 'chromium-driver' packages (sudo apt-get install chromium chromium-driver)." >&2; exit 1; }

# kcat (Debian's package, a librdkafka command-line client) drives tests/integration/test_kcat.py:
# installed where we may (as root, with apt-get), otherwise a clear message says what to install.
KCAT ?= /usr/bin/kcat
check-kcat:
	@test -x $(KCAT) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing kcat (Debian package kcat)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null; }; \
	  fi; }
	@test -x $(KCAT) || { \
	  echo "error: the kcat tests need kcat ($(KCAT)): install Debian's 'kcat' package (sudo apt-get install kcat) or set KCAT." >&2; exit 1; }

# The dual-write tests start throwaway PostgreSQL servers (Debian's package, any version
# under /usr/lib/postgresql): installed where we may (as root, with apt-get), otherwise a
# clear message says what to install.
check-postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing PostgreSQL (Debian package postgresql)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; }; \
	  fi; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  echo "error: the dual-write tests need PostgreSQL (initdb, pg_ctl): install Debian's 'postgresql' package (sudo apt-get install postgresql)." >&2; exit 1; }

# KafkaJS (from npm, pinned in tests/node/package-lock.json) drives tests/integration/test_kafkajs*.py
# through Node.js scripts; `npm ci` runs only when the lock file is newer than the install.
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
check-node:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Node.js (Debian packages nodejs and npm)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm >/dev/null; }; \
	  fi; }
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
	  echo "error: the KafkaJS tests need Node.js and npm: install Debian's 'nodejs' and 'npm' packages (sudo apt-get install nodejs npm)." >&2; exit 1; }

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json | check-node
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

kafkajs: $(NODE_STAMP)

# `make run ARGS="--brokers N"` (N > 1) runs the demo on a cluster, which needs ZooKeeper;
# on its one embedded broker (no --brokers, or --brokers 1) it does not.
DEMO_BROKERS := $(patsubst --brokers=%,%,$(filter --brokers=%,$(subst --brokers ,--brokers=,$(ARGS))))

run: ZOOKEEPER_USER = the demo on a cluster (--brokers $(DEMO_BROKERS)) needs
run: compile check-java $(if $(filter-out 1,$(DEMO_BROKERS)),check-zookeeper)
	$(BIN)/python -m onceflow.demo $(ARGS)

# The dual-write demo: an order service killed at random points, the broker and PostgreSQL
# crashed and restarted, and the table that shows every committed order has exactly one
# event. PostgreSQL if installed (ARGS="--database sqlite" without it), "--rounds N".
run-orders: compile
	$(BIN)/python -m onceflow.demo.orders $(ARGS)

serve: compile
	$(BIN)/python -m onceflow serve --data-dir ./data --listener 127.0.0.1:9092 $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# The suite mostly waits (timeouts, restarts, ZooKeeper sessions, Spark batches), so it runs
# on TEST_WORKERS workers, each test file on one of them (its module fixtures shared). Three
# workers on two cores: 25-26 min; two workers took 31-33 min. A worker that crashes (a
# client library's native abort) is not replaced: the test it ran fails, named, and the others
# finish, where replacing it under --dist loadfile can hang pytest-xdist 3.8 until the CI limit.
TEST_WORKERS ?= 3
test: lint compile check-java check-zookeeper check-chromium check-kcat check-postgresql kafkajs
	@ONCEFLOW_CHROMIUM=$(CHROMIUM) ONCEFLOW_CHROMEDRIVER=$(CHROMEDRIVER) ONCEFLOW_KCAT=$(KCAT) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0 $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; else exit $$rc; fi; }

unit: compile
	$(BIN)/python -m pytest tests/unit tests/property tests/simulation $(PYTEST_ARGS)

bench: compile
	$(BIN)/python -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
