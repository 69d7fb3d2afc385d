# attnbench: run the notebooks, build the site, test.
#   make all    run every notebooks/*.md (cached cells are not re-run), then build site/
#   make site   build site/ from outputs/ alone (no cell runs)
#   make test   the README's test command (leaves out the `slow` tests: whole-notebook runs, 4-/8-rank checks)
#   make test-all  every test, the slow ones included (what CI runs)
#   make lint   ruff
# Extra options for `attnbench run`, e.g. make all RUN_ARGS="--env python -p profile=smoke"
NOTEBOOKS := $(wildcard notebooks/*.md)
RUN_ARGS ?=

.PHONY: all run site test test-all lint clean

all:
	@status=0; uv run attnbench run $(NOTEBOOKS) $(RUN_ARGS) || status=$$?; \
	uv run attnbench build || exit $$?; \
	exit $$status

run:
	uv run attnbench run $(NOTEBOOKS) $(RUN_ARGS)

site:
	uv run attnbench build

test:
	uv run pytest -q

test-all:
	uv run pytest -q -m ""

lint:
	uv run ruff check src tests scripts
	uv run ruff format --check src tests scripts
	uv run lint-imports

clean:
	uv run attnbench clean
