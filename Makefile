# Set-up from nothing, then run. A second call with nothing changed skips the installs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMPS := .stamps
APT_PACKAGES := gcc libvulkan1 libvulkan-dev mesa-vulkan-drivers glslang-tools spirv-tools zstd vulkan-validationlayers gfxreconstruct renderdoccmd chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast typecheck bench setup clean golden

setup: $(STAMPS)/system $(VENV)/.installed capture/_kernels.so
	@# Bytecode for our modules even where PYTHONDONTWRITEBYTECODE is set: it halves start-up.
	@$(VENV)/bin/python -m compileall -q vkcore capture replay vkcap >/dev/null

$(STAMPS)/system:
	@mkdir -p $(STAMPS)
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	    echo "installing system packages: $(APT_PACKAGES)"; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi
	@touch $@

$(VENV)/.installed: pyproject.toml
	@[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install -q --disable-pip-version-check -e ".[test,ray]"
	@touch $@

# The encoders' compiled loops (capture/kernels_build.py): a plain shared library, any Python version.
capture/_kernels.so: capture/kernels.c capture/kernels_build.py | $(STAMPS)/system $(VENV)/.installed
	@$(VENV)/bin/python -m capture.kernels_build

demo: setup
	$(VENV)/bin/vkcap run examples/add/scenario.json --output build/demo
	$(VENV)/bin/vkcap record examples/add/scenario.json --output build/demo -o build/demo/add.vkt
	$(VENV)/bin/vkcap info build/demo/add.vkt
	$(VENV)/bin/vkcap replay build/demo/add.vkt

test: setup
	VKCAP_TEST_STRICT=1 $(VENV)/bin/python -m pytest -q -n 2 tests

test-fast: setup  ## the tests not marked slow (about a third of the suite's functions are): under a minute on 2 cores
	$(VENV)/bin/python -m pytest -q -n 2 -m "not slow" tests

typecheck: setup
	@# -e: a plain ".[dev]" would replace the editable install with a copy of today's sources
	@$(VENV)/bin/python -m mypy --version >/dev/null 2>&1 || $(VENV)/bin/pip install -q --disable-pip-version-check -e ".[test,ray,dev]"
	$(VENV)/bin/python -m mypy vkcore capture replay vkcap

bench: setup
	$(VENV)/bin/python bench/run_vs_reference.py

clean:
	rm -rf $(VENV) $(STAMPS) build

golden: setup  ## re-record the golden traces in traces/ (on lavapipe, as they were made)
	for e in add heat fragment blur conv2d tensor_op graph_custom; do \
	    $(VENV)/bin/vkcap record examples/$$e/scenario.json --output build/golden/$$e -o traces/$$e.vkt --device llvmpipe || exit 1; \
	done
