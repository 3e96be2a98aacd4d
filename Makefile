# The common actions, one word each. Everything installs into .venv from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
REGISTRY := $(VENV)/bin/registry

# Trials the demo tunes (tests/test_readme.py runs the README's commands with fewer).
DEMO_TRIALS ?= 32

.PHONY: install install-dev browser demo examples test lint bench bench-tuning bench-gpu gpu-pack corpus bench-corpus bench-cnn bench-isolation \
	bench-corpus-depth bench-sync bench-verify bench-serve bench-together bench-siblings bench-no-measure starter bench-starter bench-starter-corpus \
	clean

# The package alone: what `make demo` needs. The dev tools (pytest, ruff, hypothesis) come with `make test`/`make lint`.
# A venv made before xgboost-cpu holds `xgboost` with its NCCL GPU libraries (about 470 MB): that is dropped first.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if $(PY) -m pip show -q nvidia-nccl-cu12 2>/dev/null; then $(PY) -m pip uninstall -q -y xgboost nvidia-nccl-cu12; fi
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# Tune a small model built in code into the embedded SQLite registry, then show what is stored.
demo: install
	$(PY) -m registry.pipeline.demo --trials $(DEMO_TRIALS)
	$(REGISTRY) lookup --model demo-mlp
	$(REGISTRY) stats

# The README's example models, written into examples/ (built in code: no download, no TVM).
examples: install
	$(PY) -m registry.tvm_side.examples examples

test: install-dev
	$(VENV)/bin/pytest -q

lint: install-dev
	$(VENV)/bin/ruff check registry cli migrations tests bench
	$(VENV)/bin/ruff format --check registry cli migrations tests bench

# The store benchmark: minutes, not seconds. See docs/BENCHMARKS.md.
bench: install
	$(PY) bench/store_bench.py

# registry tune against plain tune_relax: about 25 minutes on 2 cores. See docs/BENCHMARKS.md.
bench-tuning: install
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) bench/tuning/run.py

# Real third-party ONNX models (bench/corpus/): installs the corpus extra (CPU torch, transformers, onnxruntime),
# exports or downloads every model into ~/.cache/tvm-registry/corpus ($$TVM_REGISTRY_CORPUS), then checks that each
# imports. torch==2.13.0+cpu is not on PyPI: CORPUS_PIP_ARGS says where pip finds it (a folder holding the wheel, or
# --extra-index-url with PyTorch's CPU index).
CORPUS_PIP_ARGS ?= --find-links /opt/wheels
corpus: install
	$(PY) -m pip install -q $(CORPUS_PIP_ARGS) -e '.[dev,corpus]'
	$(PY) bench/corpus/materialize.py
	$(PY) bench/corpus/check_import.py

# On a machine with an NVIDIA GPU (docs/GPU.md): registry tune and transfer against plain tune_relax and PyTorch on
# two BERT sizes and a ViT, in resumable steps (each under 9 minutes; run it again to go on). On the GPU machine of
# this workplace, which has no network, see docs/GPU.md: `make gpu-pack` here, then the runs it prints.
bench-gpu:
	$(PY) bench/gpu/run.py all --until 480 --out bench/results/gpu.json

# What the GPU machine needs carried (it has no network): TVM and the wheels (../shared/gpu/prepare.sh, into .gpu/),
# and the benchmark's models and the shared test data (into .gpu-models/). Needs `make corpus` first (the exporter).
gpu-pack: install
	bash ../shared/gpu/prepare.sh
	TVM_REGISTRY_CORPUS=.gpu-models $(PY) -c "import sys; sys.path.insert(0, '.'); from bench.corpus.catalogue import \
		BY_NAME, materialize; [materialize(BY_NAME[m]) for m in ('gpu-bert-l2-h128', 'gpu-bert-l2-h192', 'gpu-vit-l2-h128')]"
	mkdir -p .gpu-models/data && cp -r ../shared/data/ms_bert_src_cuda_h100 ../shared/data/h100_registry_runs .gpu-models/data/
	grep -qx '/.gpu-models/' .git/info/exclude || echo '/.gpu-models/' >> .git/info/exclude

# The corpus benchmark: every corpus model untuned, after transfer, after tune, and onnxruntime, then its table and
# plot (about 2 hours on 2 cores; re-running resumes). The run in docs/BENCHMARKS.md: 1 trial per task, at least 64
# per model, and transfer registries without the model's whole group of families.
bench-corpus: corpus
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/corpus/run.py --trials-per-task 1 --leave-out group
	$(PY) bench/corpus/table.py
	$(PY) bench/corpus/plot.py

# 8 models of the corpus (two text transformers, a ViT, two CNNs, three from wheels), every task of at least 1% of its
# model tuned to 32+ measured trials (about 40 minutes on 2 cores; stop it any time, the same command resumes).
DEPTH_MODELS := bert-l2-h128 gpt2-l2-h128-lmhead vit-l2-h192-p8 resnet-basic-w32 convnext-femto ppocr-v4-det \
	ppocr-mobile-v2-cls magika-v3.3
bench-corpus-depth: corpus
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/corpus/run.py --only --floor 32 --trials-per-task 36 --leave-out group \
		--work bench/work/corpus32 --out bench/results/corpus32.json $(DEPTH_MODELS)
	$(PY) bench/corpus/table.py bench/results/corpus32.json

# What out-of-process measurement costs transfer, against the in-process version it replaced (commit c4e7abb, set up
# in ../wt-old as bench/measure/isolation.py says).
bench-isolation: install
	$(PY) bench/measure/isolation.py --old-registry ../wt-old/.venv/bin/registry

# Sharing (issue #12): `registry sync` of 10^6 records SQLite -> PostgreSQL and an incremental re-sync; `registry
# verify` throughput; the starter bundle on models outside it (run after bench-corpus: it is built from its registries).
bench-sync: install-dev
	$(PY) bench/sync_bench.py --logs bench/work/sync_logs --records 1000000 --runs 3

bench-verify: install-dev
	$(PY) bench/verify_bench.py --logs bench/work/verify_logs --runs 5

# Serving (issue #36): wrk against `registry serve` at 10^5 and 10^6 records on SQLite and PostgreSQL, and pull/push
# throughput against a local import (about 25 minutes; wrk is Debian's).
bench-serve: install
	command -v wrk >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends wrk)
	$(PY) bench/serve_bench.py

# Tuning together (issue #37): tune processes on one PostgreSQL registry dividing the work, a killed one taken over,
# plateaued tasks skipped (about 25 minutes; needs `make corpus`).
bench-together: corpus
	$(PY) bench/together_bench.py

# A new device seeded by a sibling's records (issue #37): trials to plain MetaSchedule's 512-trial latency, AVX2
# sibling against this CPU (about an hour; needs `make corpus`).
bench-siblings: corpus
	$(PY) bench/tuning/siblings.py --pair mcpu

# One-shot compile (issue #37): transfer --no-measure against measured transfer on held-out models, over a registry
# the siblings benchmark left, and the predictor's held-out quality per device.
bench-no-measure: corpus
	$(PY) bench/no_measure_bench.py --registry bench/work/siblings/new-mcpu-siblings-bert-l2-h128.db \
		bench/work/siblings/new-mcpu-siblings-resnet-basic-w32.db

# Convolutional networks against onnxruntime (issue #38): `registry tune --budget 10m` on a YOLOv8n, PaddleOCR det and
# a MobileNetV2 from an empty registry, time per kind of convolution against onnxruntime's profile, output error; then
# a first transfer of a YOLOX-style detector after `registry pull` (about 50 minutes; needs `make corpus`).
bench-cnn: corpus
	$(PY) bench/cnn_bench.py mobilenetv2-0.35 ppocr-v4-det nudenet-yolov8n-320
	$(PY) bench/cnn_bench.py --transfer --start starter ddddocr-det

starter: install
	$(PY) bench/corpus/starter.py

bench-starter: install
	$(PY) bench/starter_bench.py --rounds 3

# The starter bundle on 6 corpus models outside it: `registry pull`, then a new user's first `registry transfer` with
# every default (docs/BENCHMARKS.md, "The starter bundle: a new user's first transfer").
OUTSIDE_MODELS := distilbert-l2-h128 t5-encoder-l2-d128 whisper-encoder-l2-d128 resnet-bottleneck-w64 mobilenetv2-0.35 \
	ppocr-v5-det
bench-starter-corpus: install
	$(PY) bench/starter_bench.py --corpus $(OUTSIDE_MODELS) --every-default --rounds 3 \
		--out bench/results/starter_first_transfer.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache examples

# Debian's Chromium, for the headless-browser tests of the report and the web view (tests/test_report.py,
# tests/test_web_view.py; they skip without a browser, and the run's summary says so).
browser:
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q --no-install-recommends chromium)
