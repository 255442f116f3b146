# One entry point for people and CI. Each target creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv bringup demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[torch]'
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
