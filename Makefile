# One entry point for people and CI. Each target creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv bringup demo test bench clean

# The Verilator runtime every model links (about 18 s of one core) compiles while pip installs
# PyTorch (one core, unpacking), so a machine's first simulator build does not wait for it
# (cosim/runtime_setup.py). Its failure is reported, not fatal: the first build compiles it then.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -m cosim.runtime_setup >$(VENV)/runtime-setup.log 2>&1 & rt=$$!; \
	$(BIN)/pip install --quiet -e '.[torch]'; rc=$$?; \
	if wait $$rt; then cat $(VENV)/runtime-setup.log; \
	else echo "warning: the Verilator runtime was not compiled at setup; the first simulator build compiles it:"; \
	     tail -n 20 $(VENV)/runtime-setup.log; fi; \
	exit $$rc
	touch $(STAMP)

venv: $(STAMP)

# The main job: the first-light checklist on the default revision (A0, Verilator).
bringup: $(STAMP)
	$(BIN)/firstlight bringup --report firstlight-out/bringup

# A short demo of single kernel runs.
demo: $(STAMP)
	$(BIN)/firstlight run gemm --m 37 --n 19 --k 100
	$(BIN)/firstlight run reduce --rows 6 --cols 50 --op max

# The test suite (Amaranth-sim unit tests + cocotb runs on every installed simulator).
test: $(STAMP)
	$(BIN)/python -m pytest -n 2

bench: $(STAMP)
	$(BIN)/firstlight bench

clean:
	rm -rf $(VENV) firstlight-out
