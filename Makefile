# One entry point for people and CI. Each target creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv bringup demo test bench clean

# The `torch` extra's requirements, one per line as pyproject.toml lists them: installed from that
# file, not as `-e '.[torch]'`, which would build and install the project a second time (about 4 s).
TORCH_REQS = $(VENV)/torch-requirements.txt
TORCH_EXTRA = import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["torch"]))

# What a machine's first simulator build would compile for itself (the Verilator runtime of the
# default build, about 18 s of one core; Amaranth's Yosys, compiled on its first run) is made
# while pip installs PyTorch, which keeps about one core busy unpacking (cosim/toolchain_setup.py).
# Its failure is reported, not fatal: the first build makes them then, and reports its own error.
# An interrupted setup stops it (a background job of sh ignores Ctrl-C); an hour is a hung one.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -c '$(TORCH_EXTRA)' > $(TORCH_REQS)
	timeout 3600 $(BIN)/python -m cosim.toolchain_setup >$(VENV)/toolchain-setup.log 2>&1 & rt=$$!; \
	trap 'kill $$rt 2>/dev/null; exit 130' INT TERM HUP; \
	$(BIN)/pip install --quiet -r $(TORCH_REQS); rc=$$?; \
	if wait $$rt; then cat $(VENV)/toolchain-setup.log; \
	else echo "warning: the toolchain setup failed (the first simulator build will try again):"; \
	     tail -n 20 $(VENV)/toolchain-setup.log; fi; \
	exit $$rc
	$(BIN)/pip check
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
