# Feeding the Beast. `make lab` to learn, `make test` to check everything.
#   CUDA=12        use the CUDA 12 driver pins (default 13, or those the .venv has)
#   ENV=current    use the Python environment you are in (PYTHON3, e.g. a GPU image's; a venv or not);
#                  install nothing, or with WHEELS=dir install that bundle into it (--no-deps).
#                  FEEDBEAST_ENV=current in the environment does the same (the workshop hub sets it).
#   WHEELS=dir     install from a wheel bundle with no index (air-gapped hosts; see make wheelhouse)
#   PYTHON3=...    the interpreter that creates .venv (3.11 or newer); once .venv runs, later commands keep its
#                  Python unless PYTHON3 is given again
PYTHON3_GIVEN := $(filter command line environment,$(origin PYTHON3))
PYTHON3 ?= python3
PY      ?= 3.12
# Not given: the pins the .venv was installed with (made by make lab CUDA=12, a later make grade keeps CUDA 12)
CUDA    ?= $(if $(wildcard $(VENV)/.installed-cu13),13,$(if $(wildcard $(VENV)/.installed-cu12),12,13))
# ENV from the command line only: an ENV in the environment is POSIX sh's start-up file, not ours.
ifneq ($(origin ENV),command line)
ENV     := $(or $(FEEDBEAST_ENV),venv)
endif
VENV    ?= .venv
WHEELS  ?=
SET     ?= full
# From the environment only a value the rules read (an exported CUDA=/usr/local/cuda is some other program's, and is
# passed on to what make runs as it was): the rules read CUDA_V, SET_V, PY_V and ARCH_V. Typed on the command line, a value no
# rule reads stops make (the end of this file).
$(foreach v,CUDA_V SET_V PY_V ARCH_V,$(if $(filter command line,$(origin $(v))),$(error make: $(v) is this Makefile's own: \
	give $(v:_V=)=$($(v)). Nothing was run)))
PY_FORM = 3\.?(1[1-9]|[2-9][0-9])(\.[0-9]+)?
valid_py = $(shell echo '$(subst ',,$(1))' | grep -Ex '$(PY_FORM)')
typed = $(filter command line,$(origin $(1)))
CUDA_V := $(if $(call typed,CUDA),$(CUDA),$(or $(filter 12 13,$(CUDA)),13))
SET_V  := $(if $(call typed,SET),$(SET),$(or $(filter full notebook,$(SET)),full))
PY_V   := $(if $(call typed,PY),$(PY),$(if $(call valid_py,$(PY)),$(PY),3.12))
# the machine a bundle is for: x86_64, or aarch64 (Grace Hopper and other Arm servers); ARCH in the environment is
# often another program's (ARCH=x86, arm64): only these two words are taken from there
ARCH_V := $(if $(call typed,ARCH),$(ARCH),$(or $(filter x86_64 aarch64,$(ARCH)),x86_64))
$(if $(filter-out $(CUDA),$(CUDA_V)),$(if $(shell echo '$(subst ',,$(CUDA))' | grep -Ex '[0-9.]+'),$(warning make: \
	CUDA=$(CUDA) in the environment is not one of 12 13: using 13 (make ... CUDA=12 for the CUDA 12 pins))))
ifneq ($(filter wheelhouse,$(MAKECMDGOALS)),)
$(if $(SET),$(if $(filter-out $(SET),$(SET_V)),$(warning make: SET=$(SET) in the environment is not one of full notebook: \
	using full)))
$(if $(filter-out $(PY),$(PY_V)),$(warning make: PY=$(PY) in the environment is no Python version: using 3.12))
endif
NB_TIMEOUT ?= 900
# A notebook's kernel may take more than nbval's 60 s to answer when 8 workers compile on every core (seen on a
# 16-core GPU machine: one chapter's 33 cells errored before they ran); a kernel that never answers still fails
NB_STARTUP ?= 300
# The processes make starts (notebooks, tests, tools) install the course's hooks into the library (feedbeast.hooks)
export FEEDBEAST_HOOKS ?= feedbeast.course

PYVER = import sys; print("%d.%d" % sys.version_info[:2])
# Which Python: its version and the interpreter a venv of it links to (a venv's python is a link to its base)
PYID = import os, sys; print("%d.%d" % sys.version_info[:2], os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
ifeq ($(ENV),current)
PYTHON  := $(PYTHON3)
STAMP   := $(if $(WHEELS),bundle-into-current,current-has-course)
# ENV=current asks for this Python: a Debian/Ubuntu system Python refuses pip (PEP 668, EXTERNALLY-MANAGED)
# unless told that the install is meant.
PIP_ENV := PIP_BREAK_SYSTEM_PACKAGES=1
else
PYTHON  := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-cu$(CUDA_V)
PIP_ENV :=
# Without PYTHON3 given, a .venv that runs keeps the interpreter it was made from (made with PYTHON3=python3.12 for
# a bundle, it is not made again by a later `make grade`, which offline could not). A .venv made by another Python than
# a PYTHON3 given (another version or another interpreter), or one that no longer runs, is made again: venv would keep
# its interpreter, and the stamp knows only the requirements.
ifeq ($(PYTHON3_GIVEN),)
VENV_BASE := $(shell $(VENV)/bin/python -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>/dev/null)
PYTHON3 := $(or $(VENV_BASE),$(PYTHON3))
endif
ifneq ($(wildcard $(VENV)),)
ifneq ($(shell $(VENV)/bin/python -c '$(PYID)' 2>/dev/null),$(shell $(PYTHON3) -c '$(PYID)' 2>/dev/null))
$(shell rm -f $(VENV)/.installed-cu*)
endif
endif
endif
REQS    := requirements/base.txt requirements/cu$(CUDA_V).txt
PIP_SRC := $(if $(WHEELS),--no-index --find-links $(WHEELS),)
# What an offline install from WHEELS can tell about its bundle when pip fails: a notebook bundle (make wheelhouse
# SET=notebook) holds no JupyterLab and no hub, and a bundle holds one Python version's wheels.
WHEELS_DIR = $(patsubst %/,%,$(WHEELS))
NOTEBOOK_BUNDLE = $(if $(wildcard $(WHEELS_DIR)/*.whl),$(if $(wildcard $(WHEELS_DIR)/jupyterlab-*.whl),,yes))
BUNDLE_PY = $(shell ls $(WHEELS_DIR) 2>/dev/null | sed -n 's/.*-cp3\([0-9][0-9]*\)-cp3[0-9]*-.*/3.\1/p' | sort -u | head -1)
BUNDLE_ARCH = $(shell ls $(WHEELS_DIR) 2>/dev/null | sed -n 's/.*linux.*_\(x86_64\|aarch64\)\.whl$$/\1/p' | sort -u | head -1)
# a bundle made for the other kind of machine (make wheelhouse ARCH=...): pip says only "not a supported wheel"
ARCH_HINT = $(if $(BUNDLE_ARCH),[ "$$(uname -m)" = "$(BUNDLE_ARCH)" ] || echo "  its wheels are for $(BUNDLE_ARCH) \
	machines and this one is $$(uname -m): make the bundle with make wheelhouse ARCH=$$(uname -m)" >&2;)
NOTEBOOK_BUNDLE_HINT = $(WHEELS_DIR)/ is a notebook bundle (make wheelhouse SET=notebook): it holds the course's \
	packages for a Python that already has Jupyter$(comma) CUDA Python$(comma) Numba and matplotlib (a GPU image: make \
	install ENV=current WHEELS=$(WHEELS_DIR)), not JupyterLab \
	or the hub; bring the full bundle (make wheelhouse, for the Python that installs it)
NO_WHEELS_HINT = $(if $(WHEELS),$(if $(wildcard $(WHEELS_DIR)/*.whl),,$(WHEELS_DIR)/ $(if $(wildcard \
	$(WHEELS_DIR)/.),holds no wheels,does not exist (no such folder) and so holds no wheels): copy here the folder that \
	make wheelhouse wrote on a machine with internet, or give its path (WHEELS=/path/to/wheelhouse)))
comma   := ,

TARGETS := help install bundle-into-current current-has-course lab test test-fast bench bench-llm labs reset-labs wheelhouse \
	clean grade book sanitize stress workshop gpu-check
.PHONY: $(TARGETS)
# A word after the target that names no target ("make reset-labs 04") is a second goal to make, which runs after the
# first has done its work on every lab; a lower-case variable ("lab=04") is another variable. Both are refused before
# anything runs, naming what was meant (the case check is at the end, where every variable is known).
STRAY_GOALS := $(filter-out $(TARGETS) $(STAMP),$(MAKECMDGOALS))
ifneq ($(STRAY_GOALS),)
$(error make $(MAKECMDGOALS): $(STRAY_GOALS) is no target of this Makefile (make help lists them)$(if $(filter grade \
	reset-labs labs,$(MAKECMDGOALS)),; a lab is chosen with the variable LAB: make $(firstword $(filter grade \
	reset-labs labs,$(MAKECMDGOALS))) LAB=$(firstword $(STRAY_GOALS))). Nothing was run)
endif
help:
	@sed -n 's/^## //p' Makefile

## make install    set up only: .venv, or with ENV=current WHEELS=dir the bundle into the current Python
install: $(STAMP)

# pip keeps an installed package whose version the wheel repeats; the course's own wheel always says 0.1.0, so after
# an update of the course it is installed again over the one before (--force-reinstall).
COURSE_WHEEL = $(wildcard $(WHEELS)/feedbeast-*.whl)
# what the messages call the command: the target typed (make lab, make workshop, ...), which installs the bundle first
TYPED = make $(or $(firstword $(MAKECMDGOALS)),install) ENV=current
# ENV=current installs nothing: the Python it names must have the course already
current-has-course:
	@if ! err=$$($(PYTHON) -c 'import feedbeast' 2>&1); then echo "$(TYPED): $(PYTHON) ($$(command -v $(PYTHON) || \
	echo not found)) cannot import feedbeast ($$(printf '%s\n' "$$err" | tail -n 1)). ENV=current uses the Python \
	you are in: activate the environment the course is installed in (. <env>/bin/activate), or name its Python \
	(PYTHON3=<env>/bin/python), or install the course into this one (make install ENV=current WHEELS=dir, or the \
	README's wheel command)" >&2; exit 1; fi
bundle-into-current:
	@# A notebook bundle holds no CUDA Python, no Numba and no matplotlib: it completes a GPU image's Python, not a
	@# bare one (checked before anything is installed, so a refused Python is left as it was).
	$(if $(NOTEBOOK_BUNDLE),@$(PYTHON) -c "import cuda.bindings$(comma) cuda.core$(comma) numba$(comma) matplotlib" 2>/dev/null || { \
	have=$$($(PYTHON) -c '$(PYVER)'); echo "$(TYPED): $(PYTHON) lacks CUDA Python$(comma) Numba or matplotlib \
	(import cuda.bindings$(comma) cuda.core$(comma) numba$(comma) matplotlib failed)$(comma) which $(WHEELS_DIR)/ does not hold: it is a notebook \
	bundle (make wheelhouse SET=notebook)$(comma) for a Python that has them already (a GPU image). Bring the full \
	bundle (make wheelhouse PY=$$have) and install it the same way$(comma) or build a fresh .venv from it (make \
	install WHEELS=dir)" >&2; exit 1; })
	@$(PIP_ENV) $(PYTHON) -m pip install -q --no-index --no-deps $(WHEELS)/*.whl || { have=$$($(PYTHON) -c '$(PYVER)'); \
	  echo "$(TYPED): pip could not install $(WHEELS_DIR)/ into $(PYTHON) (Python $$have)" >&2; \
	  $(if $(NO_WHEELS_HINT),echo "  $(NO_WHEELS_HINT)" >&2;) \
	  [ -z "$(BUNDLE_PY)" ] || [ "$$have" = "$(BUNDLE_PY)" ] || echo "  its wheels are for Python $(BUNDLE_PY): \
	pass PYTHON3=python$(BUNDLE_PY)$(comma) or make a bundle for $$have (make wheelhouse PY=$$have$(if $(NOTEBOOK_BUNDLE), SET=notebook))" >&2; \
	  $(ARCH_HINT) \
	  exit 1; }
	$(if $(COURSE_WHEEL),$(PIP_ENV) $(PYTHON) -m pip install -q --no-index --no-deps --force-reinstall $(COURSE_WHEEL))
	@# the notebooks name their kernel: without it the image's own Jupyter says "No such kernel named feedbeast"
	@$(PYTHON) $(KERNELSPEC) || echo "$(TYPED): the kernel 'Feeding the Beast' could not be written \
	into $(PYTHON)'s environment (share/jupyter/kernels; why: above): the notebooks name that kernel, so Jupyter will \
	ask which kernel to use (take this Python), until $(PYTHON) -m feedbeast.course.kernelspec runs as a user who may \
	write there" >&2

# The package index has no macOS wheels of cuda-bindings, cuda-core, numba-cuda, NVRTC or the disassembler: pip would
# fail on the first of them after making .venv, and the offline hint would follow. course_setup.py says the same.
MACOS_STOP = the course cannot be installed on macOS: NVIDIA publishes its compiler (NVRTC)$(comma) disassembler \
	(nvdisasm) and CUDA Python (cuda-bindings$(comma) cuda-core$(comma) numba-cuda) for Linux and Windows only. Run \
	it on a Linux machine (a Linux container on this Mac is one) or in a hosted notebook (README: Start). Nothing \
	was installed

# The notebooks' kernel, "Feeding the Beast", installed into the environment (not into your home): make install
# writes it so that any Jupyter front end run from .venv finds the kernel the notebooks name; make lab again.
KERNELSPEC = -m feedbeast.course.kernelspec >/dev/null

# A learner's environment: the course, JupyterLab and the book; the workshop hub comes with make workshop.
# A bundle holds the wheels of one Python version, so a failed offline install names the version.
PIP_REQS = $(VENV)/bin/python -m pip install -q $(PIP_SRC) -r requirements/cu$(CUDA_V).txt -r requirements/build.txt \
	-r requirements/lab.txt -r requirements/book.txt
$(VENV)/.installed-cu$(CUDA_V): $(REQS) requirements/lab.txt requirements/book.txt requirements/build.txt pyproject.toml
	@[ "$$(uname -s)" != Darwin ] || { echo "make: $(MACOS_STOP)" >&2; exit 1; }
	@# before venv and pip: Python 3.10 (Ubuntu 22.04's python3) got a page of pip errors and the offline hint
	@$(PYTHON3) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  v=$$($(PYTHON3) -c '$(PYVER)' 2>/dev/null) && what="is Python $$v" || what="was not found"; \
	  echo "make: $(PYTHON3) $$what: the course needs Python 3.11 or newer (its pinned numpy has no wheel for an \
	older one). Install one (the system's packages, pyenv or uv) and name it: make $(or $(firstword \
	$(MAKECMDGOALS)),install) PYTHON3=python3.12. Nothing was installed" >&2; exit 1; }
	@want=$$($(PYTHON3) -c '$(PYID)'); have=$$($(VENV)/bin/python -c '$(PYID)' 2>/dev/null || echo none); \
	  if [ -e $(VENV) ] && [ "$$have" != "$$want" ]; then \
	  echo "$(VENV) has Python $$have, $(PYTHON3) is $$want: making $(VENV) again"; rm -rf $(VENV); fi
	@# Debian and Ubuntu keep venv's pip (ensurepip) in a package of its own: a venv made without it has no pip
	@echo "$(PYTHON3) -m venv $(VENV)"
	@$(PYTHON3) -m venv $(VENV) || { v=$$($(PYTHON3) -c '$(PYVER)'); rm -rf $(VENV); echo "make: $(PYTHON3) could not \
	make $(VENV): where the OS packs venv apart (Debian, Ubuntu), install it (sudo apt install python$$v-venv) and run \
	make again" >&2; exit 1; }
	$(VENV)/bin/python -m pip install -q $(PIP_SRC) --upgrade pip
	@# the command alone is shown: the hints after it are printed only when pip fails
	@echo "$(PIP_REQS)"
	@$(PIP_REQS) || { have=$$($(VENV)/bin/python -c '$(PYVER)'); \
	  echo "make: pip could not install the pinned requirements into $(VENV) (Python $$have)$(if $(WHEELS),$(comma) from $(WHEELS_DIR)/)" >&2; \
	  $(if $(NO_WHEELS_HINT),echo "  $(NO_WHEELS_HINT)" >&2;) \
	  $(if $(WHEELS),,echo "  without internet: WHEELS=<the folder make wheelhouse wrote>; in a learner's copy made by a \
	workshop, the course's Python is installed already: FEEDBEAST_ENV=current PYTHON3=<that Python> (the hub's \
	terminals set both)" >&2;) \
	  $(if $(WHEELS),[ -z "$(BUNDLE_PY)" ] || [ "$$have" = "$(BUNDLE_PY)" ] || echo "  its wheels are for Python $(BUNDLE_PY): \
	pass PYTHON3=python$(BUNDLE_PY)$(comma) or make a bundle for $$have (make wheelhouse PY=$$have)" >&2; \
	  $(ARCH_HINT) $(if $(NOTEBOOK_BUNDLE),echo "  $(NOTEBOOK_BUNDLE_HINT)" >&2;)) exit 1; }
	$(VENV)/bin/python -m pip install -q $(PIP_SRC) --no-deps -e .
	$(VENV)/bin/python $(KERNELSPEC)
	rm -f $(VENV)/.installed-cu*
	touch $@

## make lab        set up .venv and open JupyterLab on the repository, chapter 00 open
# The server's root is the repository (chapters/, labs/, solutions/, results/ in the file browser);
# the notebooks' kernel "Feeding the Beast" is installed into this environment, not into your home;
# jupyter/ holds the lab settings (no news prompt); a new notebook starts in that kernel too.
# LAB_FLAGS adds server options, e.g. --no-browser.
LAB_FLAGS ?=
# Without JupyterLab in the environment it installs it only from a bundle (WHEELS=dir), never from the index
# unasked: a workshop room may have no network, and ENV=current promises to install nothing else.
lab: $(STAMP)
	@$(PYTHON) -c "import jupyterlab" 2>/dev/null || { \
	  if [ -n "$(WHEELS)" ]; then $(if $(NOTEBOOK_BUNDLE),echo "make lab: JupyterLab is not installed in $(PYTHON)$(comma) and \
	  $(NOTEBOOK_BUNDLE_HINT)" >&2; exit 1;) \
	  $(PIP_ENV) $(PYTHON) -m pip install -q --no-index --find-links $(WHEELS) -r requirements/lab.txt; \
	  else echo "make lab: JupyterLab is not installed in $(PYTHON). Install it from the package index with" \
	    "$(PIP_ENV) $(PYTHON) -m pip install -r requirements/lab.txt, or offline with $(TYPED) WHEELS=dir" \
	    "(a bundle from make wheelhouse; see README, Offline install)" >&2; exit 1; fi; }
	$(PYTHON) $(KERNELSPEC)
	$(if $(findstring --no-browser,$(LAB_FLAGS)),@echo "make lab: no browser here: from your own machine$(comma) \
	ssh -L 8888:localhost:8888 $$(id -un)@$$(hostname) (the port of the URL below)$(comma) then open that URL there")
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
	  $(PYTHON) -m jupyter lab --ServerApp.root_dir="$(CURDIR)" \
	  --LabApp.app_settings_dir="$(CURDIR)/jupyter/lab/settings" \
	  --LabApp.default_url=/lab/tree/chapters/00-feeding-the-beast.ipynb \
	  --MappingKernelManager.default_kernel_name=feedbeast --LabApp.extension_manager=readonly \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_FLAGS)

## make test       the whole suite: toolkit, notebooks (nbval), labs in sync, notebook format
# TEST_JOBS pytest workers (default: the cores, at most 8; pytest-xdist; each test file and each notebook stays in one worker);
# TEST_JOBS=0 runs in one process. Without pytest-xdist installed, one process.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; echo $$n)
XDIST = $$($(PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(TEST_JOBS) --dist loadfile")
test: $(STAMP)
	$(PYTHON) -m pytest -q $(XDIST) tests chapters solutions --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=$(NB_TIMEOUT) --nbval-kernel-startup-timeout=$(NB_STARTUP) -p no:cacheprovider

## make test-fast  toolkit and format tests only (no notebooks)
test-fast: $(STAMP)
	$(PYTHON) -m pytest -q $(XDIST) tests -p no:cacheprovider

## make bench      run every chapter and solution at full size on this GPU, then the LLM shape suite; results/<gpu>/
##                  BENCH="chapters/09-attention.ipynb ...": only those notebooks (or folders), no LLM suite
BENCH ?=
bench: $(STAMP)
	FEEDBEAST_RESULTS=$(CURDIR)/results $(PYTHON) -m feedbeast.course.bench_run $(or $(BENCH),chapters solutions)
	$(if $(BENCH),,FEEDBEAST_RESULTS=$(CURDIR)/results $(PYTHON) -m feedbeast.course.llm_suite)

## make bench-llm  only the LLM shape suite (chapter 07's kernels vs cuBLAS on prefill and decode shapes)
bench-llm: $(STAMP)
	FEEDBEAST_RESULTS=$(CURDIR)/results $(PYTHON) -m feedbeast.course.llm_suite

## make labs       regenerate labs/ from solutions/ (solution regions stripped; an edited lab is kept in labs/backup/)
labs: $(STAMP)
	$(PYTHON) -m feedbeast.course.labs build solutions labs

## make reset-labs [LAB=04]  restore labs/ (or lab 04 only) from solutions/, keeping a backup of any lab you edited
reset-labs: $(STAMP)
	$(PYTHON) -m feedbeast.course.labs reset solutions labs $(LAB)

## make wheelhouse PY=3.12 [SET=notebook] [COMPARE=1] [ARCH=aarch64]   wheels for an offline install (see README)
# Built in wheelhouse.new and moved into place only when complete: a failed or offline run keeps the bundle there.
# pip's own error says which wheel; this says what the target needs (and leaves no half-made bundle behind)
NO_INDEX = { rm -rf wheelhouse.new; echo "make wheelhouse: pip could not fetch the wheels above. This target \
downloads them (and setuptools, to build the course's own wheel) from a package index: PyPI, or the index pip is set \
to use (PIP_INDEX_URL, pip.conf). Run it on a machine online and copy wheelhouse/ here (README: Offline install), or \
set PIP_INDEX_URL to a local index that holds them all (a bundle of SET=full has setuptools; SET=notebook has not)" \
>&2; exit 1; }
wheelhouse:
	rm -rf wheelhouse.new && mkdir -p wheelhouse.new
	$(PYTHON3) -m pip wheel -q --no-deps -w wheelhouse.new . || $(NO_INDEX)
ifeq ($(SET_V),notebook)
	$(PYTHON3) -m pip download -q -d wheelhouse.new --only-binary=:all: --python-version $(PY_V) \
	  --platform manylinux_2_28_$(ARCH_V) --platform manylinux_2_17_$(ARCH_V) --platform manylinux2014_$(ARCH_V) \
	  -r requirements/notebook.txt || $(NO_INDEX)
	$(PYTHON3) -m pip download -q -d wheelhouse.new --no-deps --only-binary=:all: --python-version $(PY_V) \
	  --platform manylinux_2_28_$(ARCH_V) --platform manylinux_2_24_$(ARCH_V) numba-cuda==0.30.4 || $(NO_INDEX)
else
	$(PYTHON3) -m pip download -q -d wheelhouse.new --only-binary=:all: --python-version $(PY_V) \
	  --platform manylinux_2_28_$(ARCH_V) --platform manylinux_2_17_$(ARCH_V) --platform manylinux2014_$(ARCH_V) \
	  -r requirements/cu$(CUDA_V).txt -r requirements/lab.txt -r requirements/book.txt -r requirements/build.txt \
	  -r requirements/hub.txt || $(NO_INDEX)
ifeq ($(CUDA_V),13)
	@# compute-sanitizer's wheel serves only make sanitize: an index without it leaves it out, with a note.
	@# Its wheels are tagged manylinux_2_25 only.
	$(PYTHON3) -m pip download -q -d wheelhouse.new --only-binary=:all: --python-version $(PY_V) \
	  --platform manylinux_2_28_$(ARCH_V) --platform manylinux_2_25_$(ARCH_V) --platform manylinux_2_17_$(ARCH_V) \
	  --platform manylinux2014_$(ARCH_V) -r requirements/sanitize.txt || echo "compute-sanitizer's wheel is not in the bundle: make sanitize will use the \
	compute-sanitizer of a CUDA toolkit on the offline host (PATH, CUDA_HOME, /usr/local/cuda)"
endif
	@if command -v npm >/dev/null; then \
	  npm ci --prefix workshop --no-audit --no-fund --loglevel=error && mkdir -p wheelhouse.new/workshop && \
	  tar -czf wheelhouse.new/workshop/node_modules.tar.gz -C workshop node_modules; \
	else echo "make wheelhouse: warning: no npm here, so the bundle lacks the workshop hub's proxy \
	(configurable-http-proxy): offline, make workshop WHEELS=wheelhouse stops for it. Build the bundle where npm \
	(Node.js 20) is, or bring the proxy to the room's servers another way before they go offline" >&2; fi
endif
ifeq ($(COMPARE),1)
	$(PYTHON3) -m pip download -q -d wheelhouse.new --no-deps --only-binary=:all: --python-version $(PY_V) \
	  --platform manylinux_2_28_$(ARCH_V) --platform manylinux_2_27_$(ARCH_V) --platform manylinux_2_24_$(ARCH_V) \
	  --platform manylinux_2_17_$(ARCH_V) --platform manylinux2014_$(ARCH_V) --platform manylinux1_$(ARCH_V) \
	  -r requirements/compare.txt
	@dups=$$(ls wheelhouse.new/*.whl | xargs -n1 basename | sed 's/-[0-9].*//' | tr A-Z_ a-z- | sort | uniq -d); \
	if [ -n "$$dups" ]; then echo "the bundle would hold two versions of: $$dups (requirements/compare.txt pins one," \
	  "the other set resolved another): make the pins agree, or pip install --no-deps will refuse the bundle" >&2; exit 1; fi
endif
	@# A bundle of another kind (full or notebook, or for another Python: the cpXY of its wheels) already in
	@# wheelhouse/ is kept beside it, not replaced: the one that an offline host needs could not be made again there.
	@kind() { k=notebook; if ls $$1/jupyterlab-*.whl >/dev/null 2>&1; then k=full; fi; \
	  py=$$(ls $$1 | sed -n 's/.*-\(cp3[0-9]*\)-cp3[0-9]*-.*\.whl$$/\1/p' | head -n 1); echo $$k$${py:+-$$py}; }; \
	if ls wheelhouse/*.whl >/dev/null 2>&1 && [ "$$(kind wheelhouse)" != "$$(kind wheelhouse.new)" ]; then \
	  kept=wheelhouse.$$(kind wheelhouse); rm -rf $$kept && mv wheelhouse $$kept && \
	  echo "the $$(kind $$kept) bundle that was in wheelhouse/ is kept in $$kept/ (WHEELS=$$kept)"; fi
	rm -rf wheelhouse && mv wheelhouse.new wheelhouse
	@echo "wheelhouse/: $$(ls wheelhouse/*.whl | wc -l) wheels, $$(du -sh wheelhouse | cut -f1)"

## make workshop   the workshop hub: JupyterHub (requirements/hub.txt) and its proxy in workshop/node_modules
# The proxy is configurable-http-proxy at the version workshop/package-lock.json pins: from the npm registry, or
# offline from the copy make wheelhouse packs (WHEELS=dir: dir/workshop/node_modules.tar.gz).
workshop: $(STAMP)
	@$(if $(NOTEBOOK_BUNDLE),echo "make workshop: $(NOTEBOOK_BUNDLE_HINT)" >&2; exit 1)
	@$(PIP_ENV) $(PYTHON) -m pip install -q $(PIP_SRC) -r requirements/hub.txt || { echo "make workshop: pip could \
	not install the hub (requirements/hub.txt)$(if $(WHEELS), from $(WHEELS_DIR)/: $(or $(NO_WHEELS_HINT),the bundle \
	lacks it: bring the full bundle of make wheelhouse))" >&2; exit 1; }
	@if [ -n "$(WHEELS)" ] && [ -f "$(WHEELS)/workshop/node_modules.tar.gz" ]; then \
	  echo "workshop/node_modules from $(WHEELS)/workshop/node_modules.tar.gz"; \
	  rm -rf workshop/node_modules && tar -xzf "$(WHEELS)/workshop/node_modules.tar.gz" -C workshop; \
	elif command -v npm >/dev/null; then \
	  $(if $(WHEELS),echo "make workshop: $(WHEELS_DIR)/ has no workshop/node_modules.tar.gz (make wheelhouse packs it where npm \
	  is): the proxy comes from the npm registry$(comma) which needs the network";) \
	  npm ci --prefix workshop --no-audit --no-fund --loglevel=error; \
	else echo "make workshop: no npm here and no $(if $(WHEELS),$(WHEELS),WHEELS=dir)/workshop/node_modules.tar.gz: \
	the hub needs configurable-http-proxy (Node.js): install npm, or bring a bundle from make wheelhouse" >&2; exit 1; fi
	@command -v node >/dev/null || { echo "make workshop: the proxy is in workshop/node_modules, but no node is on \
	PATH and the hub cannot start without it: install Node.js 20 before the room goes offline (the OS's nodejs package, \
	or the Linux tarball from nodejs.org unpacked with its bin/ on PATH)" >&2; exit 1; }
	@# configurable-http-proxy's package.json asks for node >= 20; Debian 12 and Ubuntu 24.04 ship 18
	@node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || { echo "make workshop: node \
	$$(node --version) is too old for the proxy (configurable-http-proxy needs Node.js 20 or newer): install Node.js 20 \
	(the Linux tarball from nodejs.org, unpacked with its bin/ on PATH; docs/instructors.md)" >&2; exit 1; }
	@# the learners run this Python: a folder on its way that stops other users is found now, not at the first login
	@[ "$(REACH_CHECK)" = off ] || why=$$($(PYTHON) -m feedbeast.course.reach $(CURDIR) 2>&1) || { echo "make workshop: \
	the hub is installed, but $$why \
	(docs/instructors.md, A workshop room on one server; make workshop REACH_CHECK=off skips this check)" >&2; exit 1; }
	@echo "make workshop: the hub is ready; start it as root from a folder for its state (docs/instructors.md, \
	A workshop room on one server): $(if $(filter current,$(ENV)),$(PYTHON),$(abspath $(VENV))/bin/python) -m jupyterhub -f $(CURDIR)/workshop/jupyterhub_config.py \
	with node on PATH (sudo env PATH=\"\$$PATH\" ...; it finds the proxy in workshop/node_modules)"

## make clean      remove .venv and build outputs (the offline bundle wheelhouse/ and the labs stay)
# The offline bundle (wheelhouse/) stays: on a host without internet it cannot be made again.
clean:
	rm -rf $(VENV) build wheelhouse.new feedbeast-*.whl

## make grade [LAB=00] [STRICT=1] [TIMEOUT=600]  grade labs/NN-*.ipynb (all of them without LAB); each check: passed, failed (why) or skipped (why)
# PARTIAL (exit 2 of `python -m feedbeast grade`: nothing failed, some checks need a GPU this machine lacks) is
# not a make error unless STRICT=1 (STRICT=0 is as without it); CI reads the status from `python -m feedbeast grade`
# itself.
# TIMEOUT: seconds a check cell may run before the grade calls it hung and names where the learner's code was
# (default 600).
# LAB: a number (4, 04), a lab's name (04-mbarrier-ring or mbarrier-ring, .ipynb or not), a word only one lab's name
# has (mbarrier) or a lab file's path, as reset-labs takes it.
LAB ?=
# TIMEOUT=abc is refused in make's words (grade's own message would name its --timeout, which no one typed)
TIMEOUT_CHECK = case '$(subst ',,$(TIMEOUT))' in ''|*[!0-9]*|0|00*) echo "make grade: TIMEOUT="'$(subst ',,$(TIMEOUT))'" is no time \
	limit: give whole seconds from 1 (600 by default). Nothing was graded" >&2; exit 3;; esac;
grade: $(STAMP)
	@$(if $(filter command line,$(origin TIMEOUT)),$(TIMEOUT_CHECK)) \
	$(if $(LAB),,echo "make grade: every lab, one after the other (make grade LAB=04 grades one)";) \
	if [ -n "$(LAB)" ] && [ -f "$(LAB)" ]; then set -- "$(LAB)"; \
	else labs=$$($(PYTHON) -m feedbeast.course.labs find solutions labs $(LAB)) || exit 3; \
	  nl=$$(printf '\n_'); IFS=$${nl%_}; set -f; set -- $$labs; set +f; unset IFS; fi; \
	$(PYTHON) -m feedbeast grade$(if $(filter command line,$(origin TIMEOUT)), --timeout "$(TIMEOUT)") "$$@"; status=$$?; \
	if [ $$status -eq 2 ] && [ -z "$(filter-out 0,$(STRICT))" ]; then \
	  echo "make grade: PARTIAL is no make error (STRICT=1 makes it one), and not ok: a bug that only the skipped \
	checks catch may still be there; ok needs a GPU that runs them"; exit 0; fi; \
	exit $$status

## make book       the readable edition: chapters/ with their saved outputs as HTML in _book/
book: $(STAMP)
	$(PYTHON) book/build.py --out _book

## make sanitize [STRICT=1]  chapters and solutions under compute-sanitizer memcheck, racecheck, synccheck and the
##                  hazard checker; a tool that cannot run here is NOT CHECKED (a make error with STRICT=1)
# compute-sanitizer comes as a wheel (requirements/sanitize.txt) for CUDA 13; ENV=current and CUDA=12
# use the one found on the machine (PATH, $$CUDA_HOME, /usr/local/cuda).
SANITIZE_FLAGS ?=
sanitize: $(STAMP)
ifeq ($(ENV)-$(CUDA_V),venv-13)
	@$(PYTHON) -m pip install -q $(PIP_SRC) -r requirements/sanitize.txt || echo "make sanitize: compute-sanitizer's \
	wheel could not be installed$(if $(WHEELS), from $(WHEELS_DIR)/): using the compute-sanitizer of a CUDA toolkit on this \
	machine (PATH, CUDA_HOME, /usr/local/cuda)" >&2
endif
	@FEEDBEAST_RESULTS=$(CURDIR)/results $(PYTHON) -m feedbeast sanitize $(SANITIZE_FLAGS) chapters solutions; \
	status=$$?; if [ $$status -eq 2 ] && [ -z "$(filter-out 0,$(STRICT))" ]; then \
	  echo "make sanitize: a skip is no make error (STRICT=1 makes it one), and no pass: what was skipped was not \
	checked"; exit 0; fi; exit $$status

## make gpu-check  make test on each GPU path of the README (fresh venv, GPU image, CUDA 12); results/<gpu>/ci.md
# GPU_CHECK_FLAGS: --paths venv,current,cuda12 --wheels DIR (full bundle) --notebook-wheels DIR --cu12-wheels DIR
# --index (a package index is reachable). Needs no .venv: it makes its own under build/gpu-check/.
GPU_CHECK_FLAGS ?=
gpu-check:
	$(PYTHON3) .ci/gpu_check.py $(GPU_CHECK_FLAGS)

## make stress     the GPU tests at 100 random ragged sizes each, repeated runs compared bit for bit
STRESS ?= 100
stress: $(STAMP)
	$(PYTHON) -m feedbeast stress --n $(STRESS)

# make's variables are case-sensitive: "make grade lab=04" sets a variable nothing reads, and grades every lab; so does
# "make reset-labs LABS=04", which resets every lab. A variable of this Makefile given on the command line
# (MAKEOVERRIDES holds them) in lower case, or one S away from it (LABS, WHEEL), stops make first. Other names pass:
# the command line also sets the environment of what make runs (FEEDBEAST_STRESS=5, CUDA_VISIBLE_DEVICES=1).
CASED := LAB STRICT ENV CUDA WHEELS VENV PY SET ARCH COMPARE PYTHON3 REACH_CHECK BENCH STRESS SANITIZE_FLAGS \
	GPU_CHECK_FLAGS LAB_FLAGS TEST_JOBS NB_TIMEOUT NB_STARTUP TIMEOUT
upper = $(shell echo '$(1)' | tr a-z A-Z)
meant = $(firstword $(filter $(CASED),$(call upper,$(1)) $(patsubst %S,%,$(call upper,$(1))) $(call upper,$(1))S))
$(foreach v,$(foreach a,$(MAKEOVERRIDES),$(if $(findstring =,$(a)),$(firstword $(subst =, ,$(a))))),$(if $(filter-out \
	$(CASED),$(v)),$(if $(call meant,$(v)),$(error make: $(v)=$($(v)) names no variable of this Makefile$(if $(filter \
	$(CASED),$(call upper,$(v))), (make's variables are case-sensitive)): it is $(call meant,$(v))=$($(v)). \
	Nothing was run))))

# A value no rule reads the same way stops make too: ENV=curent would make a whole .venv (1.2 GB, online), SET=notebok
# the full bundle, CUDA=11 a missing requirements file, PY=3.1 a bundle pip cannot fill and then blames the index.
# Values typed on the command line (the environment's are taken only when valid: CUDA_V above); PY and SET only
# for the target that reads them.
oneof = $(if $(call typed,$(1)),$(if $(filter $(2),$($(1))),,$(error make: $(1)=$($(1)) is not one of $(2): $(3). \
	Nothing was run)))
$(call oneof,ENV,venv current,ENV=current uses the Python you are in)
$(if $(filter-out venv current,$(ENV)),$(error make: FEEDBEAST_ENV=$(FEEDBEAST_ENV) in the environment is not one of \
	venv current: unset it, or set it to current for the Python you are in. Nothing was run))
$(call oneof,CUDA,12 13,the CUDA driver pins (requirements/cu12.txt, cu13.txt))
ifneq ($(filter wheelhouse,$(MAKECMDGOALS)),)
$(call oneof,SET,full notebook,what make wheelhouse bundles)
$(call oneof,ARCH,x86_64 aarch64,the machine the bundle is for as uname -m names it there (an Arm server such as Grace Hopper: aarch64))
$(if $(call typed,PY),$(if $(call valid_py,$(PY)),,$(error make: PY=$(PY) is no Python version \
	the course runs on (3.11 or newer, as 3.12): make wheelhouse fetches wheels for it. Nothing was run)))
endif
