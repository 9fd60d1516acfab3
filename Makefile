# The two commands of README.md: `make episode` and `make test`. Both set up .venv first.
SHELL := /bin/bash
VENV_STAMP := .venv/.metatrain-installed
SETUP_INPUTS := pyproject.toml plugins/metatrain-families/pyproject.toml plugins/metatrain-reward/pyproject.toml plugins/metatrain-runpod/pyproject.toml plugins/metatrain-tinker/pyproject.toml examples/metatrain-example-family/pyproject.toml scripts/setup.sh

.PHONY: setup episode test test-fast test-e2e lint

$(VENV_STAMP): $(SETUP_INPUTS)
	bash scripts/setup.sh

setup: $(VENV_STAMP)

episode: $(VENV_STAMP)
	.venv/bin/metatrain episode --family calc_chain --agent reference --provider local --budget fast --json runs/last-episode.json

test: $(VENV_STAMP)
	.venv/bin/nox --no-venv -s lint typecheck tests slow notebooks

test-e2e: $(VENV_STAMP)
	.venv/bin/nox --no-venv -s e2e

test-fast: $(VENV_STAMP)
	.venv/bin/nox --no-venv -s tests

lint: $(VENV_STAMP)
	.venv/bin/nox --no-venv -s lint typecheck
